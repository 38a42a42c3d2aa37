"""The metrics our trainer adds: per-dataset and per-category means, self-correction rates."""

from __future__ import annotations

import functools
import math
import numbers
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping

import numpy as np

from rg_verl.common.names import RG_PREFIX
from rg_verl.common.stats import per_group_means
from rg_verl.grpo.sampler import SampledGroup

__all__ = [
    "category_means",
    "dataset_category",
    "group_outcomes",
    "grouped_means",
    "reward_means",
    "self_correction_rates",
]

RG_SEGMENT = RG_PREFIX.rstrip("/")
CATEGORY_SEGMENT = "category"


@functools.cache
def registered() -> dict:
    """reasoning-gym's registry, imported on first use: most Ray processes load this module and need none."""
    from reasoning_gym.factory import DATASETS

    return DATASETS


@functools.cache
def dataset_category(name: str) -> str:
    """reasoning-gym's own category of dataset ``name`` (``other`` for ``composite``); a ValueError for an unknown name.

    >>> dataset_category("chain_sum")
    'arithmetic'
    """
    datasets = registered()
    if name not in datasets:
        raise ValueError(f"Unknown reasoning-gym dataset {name!r}")
    cls = datasets[name][0]
    # the property reads only the class: no (slow) instance is built
    return cls.category.fget(cls.__new__(cls))


def _category_key(key: str) -> str | None:
    # "<section>/reasoning_gym/<dataset>/<rest>" -> "<section>/reasoning_gym/category/<category>/<rest>"
    parts = key.split("/", 3)
    if len(parts) != 4 or parts[1] != RG_SEGMENT or parts[2] not in registered():
        return None  # not per-dataset (this also skips category keys themselves)
    section, _, name, rest = parts
    return f"{section}/{RG_SEGMENT}/{CATEGORY_SEGMENT}/{dataset_category(name)}/{rest}"


def category_means(metrics: Mapping[str, object]) -> dict[str, float]:
    """Per-category unweighted means of the per-dataset metrics: each dataset counts once, however many samples.

    >>> category_means({"val-core/reasoning_gym/chain_sum/reward/mean@1": 1.0,
    ...                 "val-core/reasoning_gym/basic_arithmetic/reward/mean@1": 0.5,
    ...                 "val-aux/num_turns/min": 2})
    {'val-core/reasoning_gym/category/arithmetic/reward/mean@1': 0.75}
    """
    groups: dict[str, list[float]] = defaultdict(list)
    for key, value in metrics.items():
        if not isinstance(value, numbers.Real):
            continue
        category_key = _category_key(key)
        if category_key is not None:
            groups[category_key].append(float(value))
    return {key: math.fsum(values) / len(values) for key, values in groups.items()}


def reward_means(data_sources: list[str], infos: list[dict]) -> dict[str, float]:
    """Per-dataset means of every numeric value the reward returned."""
    names = [name for name, value in infos[0].items() if isinstance(value, int | float | np.number)] if infos else []
    return grouped_means(data_sources, {name: [info.get(name, np.nan) for info in infos] for name in names})


def group_outcomes(groups: Iterable[SampledGroup]) -> dict[str, float]:
    """Per dataset, the share of ``groups`` (filtered ones too) whose answers were all right, and all wrong.

    >>> group_outcomes([SampledGroup("a", "s", ["a_0_0", "a_1_0"], [{"accuracy": 1.0}] * 2),
    ...                 SampledGroup("b", "s", ["b_0_0", "b_1_0"], [{"accuracy": 0.0}, {"accuracy": 1.0}]),
    ...                 SampledGroup("c", "s", ["c_0_0", "c_1_0"], [{"accuracy": 0.0}] * 2, trained=False)])
    {'train/s/groups/all_correct': 0.3333333333333333, 'train/s/groups/all_wrong': 0.3333333333333333}
    """
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])  # groups, all right, all wrong
    for group in groups:
        count = counts[group.data_source]
        count[0] += 1
        count[1] += all(a == 1.0 for a in group.accuracies)
        count[2] += all(a == 0.0 for a in group.accuracies)
    metrics = {}
    for source, (total, right, wrong) in counts.items():
        metrics[f"train/{source}/groups/all_correct"] = right / total
        metrics[f"train/{source}/groups/all_wrong"] = wrong / total
    return metrics


def grouped_means(data_sources: list[str], values: dict[str, list[float]]) -> dict[str, float]:
    """Mean of each value per data source, keyed ``train/<data_source>/<name>``.

    >>> grouped_means(["a", "a", "b"], {"score": [1.0, 0.0, 1.0]})
    {'train/a/score': 0.5, 'train/b/score': 1.0}
    """
    return {
        f"train/{source}/{name}": mean
        for name, column in values.items()
        for source, mean in per_group_means(column, data_sources).items()
    }


_REVISED = re.compile(r"^(val-aux/.+)/revised/(mean@\d+)$")


def self_correction_rates(metrics: dict) -> dict[str, float]:
    """Per source, the share of revising validation responses that self-corrected; none where nothing revised.

    >>> self_correction_rates({"val-aux/math/gsm8k/revised/mean@1": 0.25,
    ...                        "val-aux/math/gsm8k/self_corrected/mean@1": 0.1})
    {'val-aux/math/gsm8k/self_correction_rate/mean@1': 0.4}
    """
    rates = {}
    for key, revised in metrics.items():
        match = _REVISED.match(key)
        corrected = metrics.get(f"{match[1]}/self_corrected/{match[2]}") if match else None
        if corrected is not None and revised > 0:
            rates[f"{match[1]}/self_correction_rate/{match[2]}"] = float(corrected) / float(revised)
    return rates
