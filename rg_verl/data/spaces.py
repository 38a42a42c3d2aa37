"""How many distinct questions a split can reach, from ``D = N * (1 - (1 - 1/N) ** n)`` over samples; the warnings.

>>> round(space_size(samples=2000, distinct=2000) or 0), round(space_size(samples=2000, distinct=216))
(0, 216)
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from reasoning_gym.factory import DATASETS, create_curriculum, create_dataset, has_curriculum

from rg_verl.common.names import SPLIT_SHARES, SPLITS
from rg_verl.common.schema import ConfigError
from rg_verl.data.config import ReasoningGymConfig
from rg_verl.data.holdout import normalise, split_of

__all__ = ["SpaceEstimate", "estimate_space", "space_size", "space_warnings", "widening_params"]

MAX_SAMPLES = 2000
BUDGET_S = 1.0
MIN_SAMPLES = 16


def space_size(samples: int, distinct: int) -> float | None:
    """The ``N`` with ``N * (1 - (1 - 1/N) ** samples) == distinct``; None when no question repeated."""
    if distinct >= samples:
        return None
    if distinct <= 1:
        return float(distinct)
    low, high = float(distinct), float(distinct) * 2
    while high * -math.expm1(samples * math.log1p(-1 / high)) < distinct:
        high *= 2
    for _ in range(100):
        mid = (low + high) / 2
        # expected distinct questions of `samples` uniform draws from `mid`
        if mid * -math.expm1(samples * math.log1p(-1 / mid)) < distinct:
            low = mid
        else:
            high = mid
    return (low + high) / 2


@dataclass(frozen=True)
class SpaceEstimate:
    """What a sample of a generator's questions says about its space."""

    dataset: str
    samples: int
    distinct: int
    by_split: dict[str, int] = field(default_factory=dict)  # distinct sampled questions in each share

    @property
    def total(self) -> float | None:
        """Estimated distinct questions of the whole space; None when the sample saw no repeat."""
        return space_size(self.samples, self.distinct)

    def reachable(self, split: str) -> float | None:
        """Estimated distinct questions in ``split``'s share; None when the space is too large to tell."""
        total = self.total
        return None if total is None else total * self.by_split.get(split, 0) / max(self.distinct, 1)

    def basis(self, split: str) -> str:
        share = f"{SPLIT_SHARES[split]:.0%}"
        return (
            f"estimated from {self.samples:,} sampled questions: {self.distinct:,} distinct, "
            f"{self.by_split.get(split, 0):,} of them in the {split} share ({share})"
        )


def estimate_space(
    name: str, config: dict, seed: int, max_samples: int = MAX_SAMPLES, budget_s: float = BUDGET_S
) -> SpaceEstimate:
    """Sample generator ``name`` at ``config`` (seeds ``seed + j``) until ``max_samples`` or ``budget_s``."""
    dataset = create_dataset(name, **config, seed=seed, size=max_samples)
    questions: set[str] = set()
    start, samples = time.perf_counter(), 0
    while samples < max_samples and (samples < MIN_SAMPLES or time.perf_counter() - start < budget_s):
        questions.add(normalise(dataset[samples]["question"]))
        samples += 1
    by_split = {split: 0 for split in SPLITS}
    for question in questions:
        by_split[split_of(question)] += 1
    return SpaceEstimate(name, samples, len(questions), by_split)


def widening_params(name: str) -> list[str]:
    """The config fields that widen ``name``'s space: its curriculum's attributes, else its integer fields."""
    if has_curriculum(name):
        fields: list[str] = []
        for attribute in create_curriculum(name).attributes.values():
            upper = getattr(attribute, "upper_field_name", None) or getattr(attribute, "field_name", None)
            if upper and upper not in fields:
                fields.append(upper)
        return fields
    config_class = DATASETS[name][1]
    fields = getattr(config_class, "__annotations__", {})
    return [f for f, kind in fields.items() if kind in (int, "int") and f not in ("seed", "size")]


def _warning(where: str, split: str, wanted: float, estimate: SpaceEstimate) -> str | None:
    reach = estimate.reachable(split)
    if reach is None or wanted <= reach:
        return None
    params = widening_params(estimate.dataset)
    widen = f"raise {', '.join(params)} in its config" if params else "change its config"
    if reach < 1:
        outcome = f"holds no question of the {split} share, so the dataset is left out of the {split} split"
    else:
        outcome = f"can reach only about {reach:,.0f} distinct questions, so its items repeat"
    return (
        f"{where}: the {split} split asks for about {wanted:,.0f} items of {estimate.dataset!r} but its space "
        f"{outcome} ({estimate.basis(split)}). To widen the space, {widen}, or lower the split's size"
    )


def space_warnings(
    settings: ReasoningGymConfig, splits: Sequence[str] = ("train", "val"), where: str = "reasoning_gym"
) -> list[str]:
    """A warning per (split, generator) asking more items than its share holds; ConfigError where a mix gives none."""
    from rg_verl.data.dataset import dataset_seed  # deliberately lazy: the dataset module imports torch

    estimates: dict[str, SpaceEstimate] = {}
    warnings = []
    for split in splits:
        mix = settings.mix(split)
        mix_where = f"{where}.{'datasets' if mix is settings.datasets else 'val_datasets'}"
        total_weight = sum(spec.weight for spec in mix.values() if spec.weight > 0)
        reachable = [name for name, spec in mix.items() if spec.weight > 0 and spec.source is not None]
        for name, spec in mix.items():
            if spec.source is not None or spec.weight <= 0:
                continue
            key = json.dumps([name, spec.config], sort_keys=True, default=str)
            if key not in estimates:
                estimates[key] = estimate_space(name, spec.config, dataset_seed(settings.seed, "train", name))
            wanted = settings.size(split) * spec.weight / total_weight
            warning = _warning(f"{mix_where}.{name}", split, wanted, estimates[key])
            if warning:
                warnings.append(warning)
            reach = estimates[key].reachable(split)
            if reach is None or reach >= 1:
                reachable.append(name)
        if not reachable:
            raise ConfigError(
                f"{mix_where}: no dataset of the {split} mix has a question in the {split} share, so the "
                f"{split} split can have no item; widen the params of {', '.join(mix)} or add datasets"
            )
    return warnings
