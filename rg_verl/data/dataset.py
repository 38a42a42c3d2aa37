"""On-the-fly reasoning-gym dataset for verl (``data.custom_cls``).

verl builds the dataset as ``ReasoningGymDataset(data_files, tokenizer, config,
processor=None, max_samples=-1)``, where ``config`` is verl's ``data`` section and
``data_files`` is ``reasoning_gym://train``, ``reasoning_gym://val`` or
``reasoning_gym://eval``. Our own settings live under ``data.reasoning_gym``::

    reasoning_gym:
      datasets:
        chain_sum: {weight: 1.0, config: {min_terms: 2, max_terms: 3}}
        leg_counting: {weight: 0.5}
      seed: 42            # base seed, 0 <= seed < 10**9
      train_size: 10000   # items per epoch, per split
      val_size: 64
      eval_size: 64
      system_prompt: default  # a key of reasoning_gym.utils.SYSTEM_PROMPTS, or literal text

Nothing is generated up front: each sub-dataset is constructed once (so that
reasoning-gym validates its config) and items are generated in ``__getitem__``.
An item is a pure function of (split seed, index). Prompts are not filtered by
length (that would need generating every item); ``tokenizer`` is unused.

Seed-space rule
---------------
reasoning-gym generates item ``j`` of a dataset built with seed ``s`` from
``Random(s + j)``. With ``SPLIT_STRIDE = 10**9``, ``DATASET_OFFSET_RANGE = 10**8``
and split number ``k`` (train=0, val=1, eval=2):

* split seed: ``split_seed = seed + k * SPLIT_STRIDE``;
* sub-dataset seed: ``split_seed + crc32(name) % DATASET_OFFSET_RANGE`` (a stable
  per-name offset, independent of the order of the config);
* item ``i`` of the split uses item ``j = i`` of the dataset picked by a weighted
  choice drawn from ``random.Random(f"{split_seed}:{i}")``.

Since every split size is at most ``SPLIT_STRIDE - DATASET_OFFSET_RANGE``, all the
generator seeds of split ``k`` lie in ``[seed + k*10**9, seed + (k+1)*10**9)``, so
train, val and eval never share a generator seed. With ``0 <= seed < 10**9`` every
seed stays below ``2**32`` (some generators seed numpy with it).
"""

from __future__ import annotations

import bisect
import itertools
import json
import operator
import random
import zlib
from collections.abc import Mapping
from typing import Any

import torch
from omegaconf import ListConfig
from reasoning_gym.factory import create_dataset
from torch.utils.data import Dataset

from rg_verl.config import AdaptiveWeightsConfig, CurriculumConfig, ReasoningGymConfig
from rg_verl.data.curriculum import MixState
from rg_verl.data.files import FileDataset
from rg_verl.vocab import (
    DATASET_OFFSET_RANGE,
    SPLIT_STRIDE,
    SPLIT_URI,
    SPLITS,
    chat_messages,
    data_source,
    system_prompt,
)

__all__ = ["ReasoningGymDataset", "parse_data_files", "split_seed", "dataset_seed", "to_json_safe"]


def parse_data_files(data_files: Any) -> str:
    """Returns the split named by ``data_files``.

    Args:
        data_files: ``"reasoning_gym://<split>"`` or a one-element list of it.

    Returns:
        The split name, one of ``train``, ``val``, ``eval``.

    Raises:
        ValueError: If ``data_files`` has any other form.
    """
    value = data_files
    if isinstance(value, list | tuple | ListConfig):
        value = value[0] if len(value) == 1 else None
    if isinstance(value, str) and value.startswith(SPLIT_URI) and value[len(SPLIT_URI) :] in SPLITS:
        return value[len(SPLIT_URI) :]
    valid = ", ".join(f"'{SPLIT_URI}{s}'" for s in SPLITS)
    raise ValueError(
        f"Unsupported data_files {data_files!r} for ReasoningGymDataset: expected one of {valid} "
        "(a string or a one-element list)."
    )


def split_seed(base_seed: int, split: str) -> int:
    """Returns the seed of ``split`` (see the module docstring)."""
    return base_seed + SPLITS.index(split) * SPLIT_STRIDE


def dataset_seed(base_seed: int, split: str, name: str) -> int:
    """Returns the seed given to reasoning-gym dataset ``name`` in ``split``."""
    return split_seed(base_seed, split) + zlib.crc32(name.encode()) % DATASET_OFFSET_RANGE


def _json_default(obj: Any) -> Any:
    if isinstance(obj, set | frozenset):
        items = list(obj)
        try:
            return sorted(items)
        except TypeError:
            return sorted(items, key=repr)
    if hasattr(obj, "tolist"):  # numpy arrays and scalars, torch tensors
        return obj.tolist()
    if hasattr(obj, "item"):
        return obj.item()
    return str(obj)


def _stringify_keys(obj: Any) -> Any:
    # JSON only allows str/int/float/bool/None keys; turn e.g. tuple keys into strings.
    if isinstance(obj, Mapping):
        return {
            (k if isinstance(k, str | int | float | bool) or k is None else str(k)): _stringify_keys(v)
            for k, v in obj.items()
        }
    if isinstance(obj, list | tuple):
        return [_stringify_keys(v) for v in obj]
    return obj


def to_json_safe(obj: Any) -> Any:
    """Returns a copy of ``obj`` made of JSON types only (dict, list, str, numbers, bool, None).

    Tuples become lists, sets sorted lists, numpy values Python numbers or lists, and
    any other object its ``str``. Dict keys become strings, as in JSON.
    """
    return json.loads(json.dumps(_stringify_keys(obj), default=_json_default))


class ReasoningGymDataset(Dataset):
    """A weighted mix of reasoning-gym datasets, generated item by item.

    Args:
        data_files: ``"reasoning_gym://<split>"`` (or a one-element list of it).
        tokenizer: Unused; accepted for verl's ``custom_cls`` signature.
        config: verl's ``data`` config; our settings are under ``reasoning_gym``.
        processor: Unused; accepted for verl's ``custom_cls`` signature.
        max_samples: If positive, caps ``len(self)``.

    Raises:
        ValueError: On a bad ``data_files``, an unknown dataset name, bad weights,
            sizes or seed, or a config that reasoning-gym rejects.
    """

    def __init__(self, data_files, tokenizer=None, config=None, processor=None, max_samples: int = -1):
        self.split = parse_data_files(data_files)
        self.tokenizer = tokenizer
        self.processor = processor
        section = config.get("reasoning_gym") if config is not None else None
        # the section's files were checked before the run (rg_verl.data.files.check_sources); _build reads
        # this split's, and its errors name the file
        settings = ReasoningGymConfig.from_section(section, where="data.reasoning_gym")
        self.base_seed = settings.seed
        self.split_seed = split_seed(self.base_seed, self.split)
        self.size = settings.size(self.split)
        self.max_samples = max_samples
        self.system_prompt = system_prompt(settings.system_prompt)

        self.mix = settings.mix(self.split)
        # the training split follows the curriculum and adaptive weights; the others stay as configured
        self.state = MixState(
            self.mix,
            settings.curriculum if self.split == "train" else CurriculumConfig(),
            settings.adaptive_weights if self.split == "train" else AdaptiveWeightsConfig(),
        )
        self.datasets = {name: self._build(name) for name in self.mix}
        self._set_weights(self.state.weights)

    def _set_weights(self, weights: dict[str, float]) -> None:
        self.weights = dict(weights)
        # Only positive weights can be picked; the cumulative table drives the weighted choice.
        self._names = [n for n, w in self.weights.items() if w > 0]
        self._cum_weights = list(itertools.accumulate(self.weights[n] for n in self._names))

    def update(self, results: dict[str, list[float]]) -> list[str]:
        """Feed one training step's results (dataset -> 1.0/0.0 per sample) to the curriculum.

        Datasets whose level changed are rebuilt, so their items come from the new level from
        the next batch on. Returns their names.
        """
        changed = self.state.update(results)
        for name in changed:
            self.datasets[name] = self._build(name)
        self._set_weights(self.state.weights)
        return changed

    def state_dict(self) -> dict:
        """Curriculum state; verl's dataloader checkpoint saves it with the run."""
        return self.state.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.state.load_state_dict(state)
        self.datasets = {name: self._build(name) for name in self.mix}
        self._set_weights(self.state.weights)

    def _build(self, name: str):
        """Dataset ``name`` of this split at its current curriculum level: generated, or read from its file."""
        spec = self.mix[name]
        config = self.state.dataset_config(name, spec.config)
        if spec.source is not None:
            seed = dataset_seed(self.base_seed, self.split, name)
            return FileDataset(name, spec.source, self.split, config, seed=seed)
        return create_dataset(name, **config, seed=dataset_seed(self.base_seed, self.split, name), size=self.size)

    def distinct_items(self, name: str) -> int | None:
        """How many distinct items mix entry ``name`` holds: a file dataset's rows, None for a generator."""
        return len(self.datasets[name]) if self.mix[name].source is not None else None

    def __len__(self) -> int:
        if self.max_samples is not None and self.max_samples > 0:
            return min(self.size, self.max_samples)
        return self.size

    def pick(self, index: int) -> str:
        """Returns the name of the dataset that item ``index`` comes from."""
        u = random.Random(f"{self.split_seed}:{index}").random() * self._cum_weights[-1]
        return self._names[min(bisect.bisect_right(self._cum_weights, u), len(self._names) - 1)]

    def __getitem__(self, index) -> dict:
        index = operator.index(index)
        if not 0 <= index < len(self):
            raise IndexError(f"index {index} out of range for {self.split} split of size {len(self)}")
        name = self.pick(index)
        dataset = self.datasets[name]
        entry = to_json_safe(dataset[index])
        answer = entry.get("answer")
        return {
            "raw_prompt": chat_messages(self.system_prompt, entry["question"]),
            "data_source": data_source(name, from_file=self.mix[name].source is not None),
            "reward_model": {"style": "rule", "ground_truth": "" if answer is None else str(answer)},
            "extra_info": {
                "split": self.split,
                "index": index,
                "dataset": name,
                "category": dataset.category,
                "entry": entry,
            },
            "index": index,
            "tools_kwargs": {},
            "interaction_kwargs": {},
            "dummy_tensor": torch.tensor([0], dtype=torch.uint8),
        }
