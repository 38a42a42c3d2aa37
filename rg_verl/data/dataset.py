"""verl's ``data.custom_cls`` (``reasoning_gym://<split>``): items as pure functions of seed, split, index, config.

The held-out rule, the seed space and the stored searches are in ``docs/data.md``.
"""

from __future__ import annotations

import bisect
import itertools
import json
import logging
import operator
import random
import zlib
from collections.abc import Mapping
from typing import Any

import torch
from omegaconf import ListConfig
from torch.utils.data import Dataset

from rg_verl.common.names import (
    DATASET_OFFSET_RANGE,
    MAX_ATTEMPTS,
    MAX_SPLIT_SIZE,
    SPLIT_STRIDE,
    SPLIT_URI,
    SPLITS,
    chat_messages,
    data_source,
    system_prompt,
)
from rg_verl.data import reference_questions
from rg_verl.data.candidates import Candidates
from rg_verl.data.config import AdaptiveWeightsConfig, CurriculumConfig, ReasoningGymConfig
from rg_verl.data.curriculum import MixState
from rg_verl.data.files import FileDataset
from rg_verl.data.holdout import question_hash, split_of
from rg_verl.data.search_cache import NOT_FOUND, SearchCache

logger = logging.getLogger(__name__)

__all__ = [
    "EmptyShareError", "ReasoningGymDataset", "dataset_seed", "item_record", "parse_data_files", "split_seed",
    "to_json_safe",
]  # fmt: skip


def parse_data_files(data_files: Any) -> str:
    """The split that ``"reasoning_gym://<split>"`` (or a one-element list of it) names."""
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
    # JSON keys are str/int/float/bool/None: e.g. tuple keys become strings
    if isinstance(obj, Mapping):
        return {
            (k if isinstance(k, str | int | float | bool) or k is None else str(k)): _stringify_keys(v)
            for k, v in obj.items()
        }
    if isinstance(obj, list | tuple):
        return [_stringify_keys(v) for v in obj]
    return obj


def to_json_safe(obj: Any) -> Any:
    """A copy of ``obj`` of JSON types only: tuples and sets as lists, numpy values as Python ones, others as str."""
    return json.loads(json.dumps(_stringify_keys(obj), default=_json_default))


def item_record(
    entry: dict, system_prompt: str | None, source: str, split: str, index: int, dataset: str, category: str
) -> dict:
    """Item ``index`` of ``split`` in verl's RLHF layout from a generator's or a file's ``entry``."""
    entry = to_json_safe(entry)
    answer = entry.get("answer")
    return {
        "raw_prompt": chat_messages(system_prompt, entry["question"]),
        "data_source": source,
        "reward_model": {"style": "rule", "ground_truth": "" if answer is None else str(answer)},
        "extra_info": {
            "split": split,
            "index": index,
            "dataset": dataset,
            "category": category,
            "question_hash": question_hash(entry["question"]),
            "entry": entry,
        },
        "index": index,
    }


class EmptyShareError(ValueError):
    """No dataset of a split's mix has a question in the split's share: the split cannot have items."""


class ReasoningGymDataset(Dataset):
    """A weighted mix of reasoning-gym datasets, generated item by item; ``tokenizer`` and ``processor`` are unused."""

    def __init__(self, data_files, tokenizer=None, config=None, processor=None, max_samples: int = -1):
        self.split = parse_data_files(data_files)
        self.tokenizer = tokenizer
        self.processor = processor
        section = config.get("reasoning_gym") if config is not None else None
        # the files were checked before the run (rg_verl.data.files.check_sources); _build's errors name the file
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
        self.datasets: dict[str, Any] = {}  # a file's rows, or candidate set 0
        self._candidates: dict[str, Candidates] = {}
        self.probes: dict[str, dict | None] = {}  # a generator's item 0: the question a failed search repeats
        self._searches: dict[str, SearchCache | None] = {}
        self._failed: set[str] = set()  # generators that failed on a candidate (warned once each)
        for name in self.mix:
            self._build(name)
        self._set_weights(self.state.weights)

    def _set_weights(self, weights: dict[str, float]) -> None:
        unreachable = self.unreachable
        if not any(w > 0 for n, w in weights.items() if n not in unreachable):
            # adaptive weights can zero every reachable dataset (all solved, floor 0): keep the configured ones
            weights = {n: (self.mix[n].weight if w <= 0 else w) for n, w in weights.items()}

        names = [n for n, w in weights.items() if w > 0 and n not in unreachable]
        if not names:
            raise EmptyShareError(
                f"no dataset of the {self.split} mix can give a {self.split} item: "
                f"{', '.join(sorted(self.unreachable))} hold no question in the {self.split} share; "
                "widen their params (see the warnings above) or add datasets"
            )
        self.weights, self._names = dict(weights), names
        self._cum_weights = list(itertools.accumulate(self.weights[n] for n in self._names))

    @property
    def unreachable(self) -> list[str]:
        """The generators whose space holds no question of this split's share (left out of the split)."""
        return [name for name, probe in self.probes.items() if probe is None]

    def update(self, results: dict[str, list[float]]) -> list[str]:
        """Feed one step's results (dataset -> 1.0/0.0 per sample) to the curriculum; returns the datasets rebuilt."""
        changed = self.state.update(results)
        for name in changed:
            self._build(name)
        self._set_weights(self.state.weights)
        return changed

    def state_dict(self) -> dict:
        """Curriculum state; verl's dataloader checkpoint saves it with the run."""
        return self.state.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.state.load_state_dict(state)
        for name in self.mix:
            self._build(name)
        self._set_weights(self.state.weights)

    def _build(self, name: str) -> None:
        """Dataset ``name`` of this split at its current curriculum level: its file's rows, or a probed generator."""
        spec = self.mix[name]
        config = self.state.dataset_config(name, spec.config)
        seed = dataset_seed(self.base_seed, self.split, name)
        if spec.source is not None:
            self.datasets[name] = FileDataset(name, spec.source, self.split, config, seed=seed)
            return
        # candidate set a holds the items of seeds seed + a * MAX_SPLIT_SIZE[split] + [0, size)
        self._candidates[name] = Candidates(name, config, seed, self.size, MAX_SPLIT_SIZE[self.split])
        self.datasets[name] = self._candidates[name].first
        if self.split != "train":  # a training item costs 1.1 candidates: nothing to keep
            stride = MAX_SPLIT_SIZE[self.split]
            self._searches[name] = SearchCache.open(name, config, seed, self.size, stride, self.split)
        self.probes[name] = self.search(name, 0)
        if self.probes[name] is None:
            logger.warning(
                "reasoning_gym: dataset %r is left out of the %s split: none of %d candidates has a question "
                "in the %s share, so its space at these params is too small; widen its params",
                name, self.split, MAX_ATTEMPTS[self.split], self.split,
            )

    def search(self, name: str, index: int) -> dict | None:
        """Item ``index`` of ``name``: its first candidate in this split's share, or None after ``MAX_ATTEMPTS``."""
        cache = self._searches.get(name)
        known = cache.lookup(index) if cache is not None else None
        if known is not None:
            attempt, digest = known
            if attempt == NOT_FOUND:
                return None
            entry = self._candidate(name, attempt, index)
            if entry is not None and question_hash(entry["question"]) == digest and self.belongs(entry["question"]):
                return entry
            cache.forget(index)  # the generator changed under the stored search: search again
        for attempt in range(MAX_ATTEMPTS[self.split]):
            entry = self._candidate(name, attempt, index)
            if entry is not None and self.belongs(entry["question"]):
                if cache is not None:
                    cache.record(index, attempt, question_hash(entry["question"]))
                return entry
        if cache is not None:
            cache.record(index, NOT_FOUND, None)
        return None

    def _candidate(self, name: str, attempt: int, index: int) -> dict | None:
        """Candidate ``attempt`` of item ``index``, or None when the generator raises on its seed (``maze``)."""
        try:
            return self._candidates[name].item(attempt, index)
        except Exception as error:  # noqa: BLE001 - any generator bug; reported once per dataset
            if name not in self._failed:
                self._failed.add(name)
                logger.warning(
                    "reasoning_gym: %s failed to generate candidate %d of %s item %d (%s: %s); such candidates "
                    "are passed over", name, attempt, self.split, index, type(error).__name__, error,
                )
            return None

    def belongs(self, question: str) -> bool:
        """Whether a question is in this split's share (and, but for ``eval``, not one of reasoning-gym's own)."""
        if split_of(question) != self.split:
            return False
        return self.split == SPLITS[-1] or not reference_questions.withheld(question)

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

    def entry(self, name: str, index: int) -> dict:
        """Mix entry ``name``'s entry for item ``index``: a file's row, or a search (the probe when it fails)."""
        if self.mix[name].source is not None:
            return self.datasets[name][index]
        if index == 0:  # the probe is item 0's search
            return self.probes[name]
        return self.search(name, index) or self.probes[name]

    def __getitem__(self, index) -> dict:
        index = operator.index(index)
        if not 0 <= index < len(self):
            raise IndexError(f"index {index} out of range for {self.split} split of size {len(self)}")
        name = self.pick(index)
        source = data_source(name, from_file=self.mix[name].source is not None)
        category = self.datasets[name].category
        return {
            **item_record(self.entry(name, index), self.system_prompt, source, self.split, index, name, category),
            "tools_kwargs": {},
            "interaction_kwargs": {},
            "dummy_tensor": torch.tensor([0], dtype=torch.uint8),
        }
