"""reasoning-gym's own items: its evaluator's, its training composite's, and the shipped list that withholds them.

``reference_questions.txt`` is written by ``PYTHONHASHSEED=0 python utils/ship_reference_questions.py``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rg_verl.common.names import MAX_SEED
from rg_verl.common.schema import ConfigError, named_mappings, option
from rg_verl.data.candidates import Candidates
from rg_verl.data.config import ReasoningGymConfig
from rg_verl.data.holdout import question_hash

__all__ = [
    "LIST_FILE", "ReferenceItems", "ReferenceTraining", "entries_digest", "list_header", "recorded_digest",
    "shipped_hashes", "training_questions", "withheld",
]  # fmt: skip

LIST_FILE = Path(__file__).with_name("reference_questions.txt")
# the header line that records which entries the list was made from (see entries_digest)
ENTRIES_TAG = "# entries:"


class ReferenceItems:
    """Items ``0 .. size-1`` of ``create_dataset(name, seed=seed, size=size, **params)``, in order.

    >>> items = ReferenceItems("chain_sum", {"min_terms": 2, "max_terms": 2}, seed=42, size=3)
    >>> len(items), items[0] == items[0], items.category
    (3, True, 'arithmetic')
    """

    def __init__(self, name: str, params: dict, seed: int, size: int):
        self.name, self.size = name, size
        self._candidates = Candidates(name, params, seed, size, stride=1)  # set 0: the dataset as built

    @property
    def category(self) -> str:
        return self._candidates.first.category

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> dict:
        if not 0 <= index < self.size:
            raise IndexError(f"{self.name}: reference item {index} is out of range (size {self.size})")
        return self._candidates.item(0, index)

    def hashes(self) -> list[str]:
        """The question hash of every item, in order."""
        return [question_hash(self[i]["question"]) for i in range(self.size)]


@functools.cache
def shipped_hashes() -> frozenset[str]:
    """The question hashes of ``reference_questions.txt`` (lines starting with ``#`` are its header)."""
    try:
        text = LIST_FILE.read_text()
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{LIST_FILE}: the list of reasoning-gym's evaluation questions is missing; reinstall rg-verl, "
            "or write it with PYTHONHASHSEED=0 python utils/ship_reference_questions.py"
        ) from None
    return frozenset(line for line in map(str.strip, text.splitlines()) if line and not line.startswith("#"))


def withheld(question: Any) -> bool:
    """Whether ``question`` is one of reasoning-gym's evaluation questions of the shipped evaluation configs."""
    return question_hash(question) in shipped_hashes()


def entries_digest(entries: Iterable[tuple[str, dict, int, int]]) -> str:
    """A digest of ``(dataset, params, seed, size)`` entries, whatever their order and repeats.

    >>> entries_digest([("ab", {}, 42, 100), ("jugs", {"difficulty": 6}, 42, 100)]) == entries_digest(
    ...     [("jugs", {"difficulty": 6}, 42, 100), ("ab", {}, 42, 100), ("ab", {}, 42, 100)])
    True
    """
    lines = sorted({json.dumps([name, params, seed, size], sort_keys=True) for name, params, seed, size in entries})
    return hashlib.blake2b("\n".join(lines).encode(), digest_size=8).hexdigest()


def list_header(entries: list[tuple[str, dict, int, int]], version: str) -> list[str]:
    """The header lines of ``reference_questions.txt`` for the list made from ``entries``."""
    return [
        "# question hashes (rg_verl.data.holdout.question_hash) of reasoning-gym's evaluation items",
        "# (create_dataset(name, seed, size, **params)) of every generator entry of evaluation/configs/**;",
        "# rg-verl's training and validation splits never hold these questions.",
        "# written by: PYTHONHASHSEED=0 python utils/ship_reference_questions.py",
        f"# reasoning-gym {version}",
        f"{ENTRIES_TAG} {entries_digest(entries)}",
    ]


def recorded_digest() -> str | None:
    """The entries digest recorded in the shipped list's header, or None."""
    for line in LIST_FILE.read_text().splitlines():
        if line.startswith(ENTRIES_TAG):
            return line[len(ENTRIES_TAG) :].strip()
    return None


def _mix(where: str, value: Any) -> dict[str, dict]:
    """The reference training mix in its given order (the composite seeds its datasets by position)."""
    mix = named_mappings(where, value, "{dataset: {weight, config}}", "{weight, config}")
    for name, spec in mix.items():
        unknown = sorted(set(spec) - {"weight", "config"})
        if unknown:
            raise ConfigError(f"{where}.{name}.{unknown[0]}: unknown key; valid keys: weight, config")
        weight, config = spec.get("weight", 1.0), spec.get("config") or {}
        if isinstance(weight, bool) or not isinstance(weight, int | float) or not weight > 0:
            raise ConfigError(f"{where}.{name}.weight: {weight!r} is not a positive number; set one, e.g. 1")
        for reserved in ("seed", "size"):
            if reserved in config:
                raise ConfigError(f"{where}.{name}.config.{reserved}: the composite sets it; remove it")
        mix[name] = {"weight": weight, "config": dict(config)}
    if mix:  # reasoning-gym's own check of each dataset's params
        ReasoningGymConfig.from_section({"datasets": mix}, where=where.rsplit(".", 1)[0])
    return mix


@dataclass
class ReferenceTraining:
    """reasoning-gym's training composite of one experiment: ``create_dataset("composite", seed, size, datasets)``."""

    datasets: dict = option({}, "the experiment's training mix, dataset -> {weight, config}, in its order", parse=_mix)
    size: int = option(20000, "its reasoning_gym.dataset_size", low=1, high=10**8)
    seed: int = option(1, "the composite's seed (1 in reasoning-gym's train_grpo.py)", low=0, high=MAX_SEED)

    def validate(self, where: str) -> None:
        if not self.datasets:
            raise ConfigError(f"{where}.datasets: needs the training mix, e.g. {{chain_sum: {{weight: 1}}}}")


def training_questions(training: ReferenceTraining, names: Iterable[str]) -> dict[str, set[str]]:
    """The question hashes of the composite's items from each of ``names``, drawn as ``CompositeDataset`` draws."""
    order = list(training.datasets)
    weights = [training.datasets[name]["weight"] for name in order]
    wanted = set(names)
    sources = {
        name: Candidates(name, training.datasets[name]["config"], training.seed + position + 1, training.size, 1)
        for position, name in enumerate(order)
        if name in wanted
    }
    questions: dict[str, set[str]] = {name: set() for name in wanted}
    if not sources:
        return questions
    for index in range(training.size):
        name = order[random.Random(training.seed + index).choices(range(len(order)), weights=weights, k=1)[0]]
        if name in sources:
            questions[name].add(question_hash(sources[name].item(0, index)["question"]))
    return questions
