"""A reasoning-gym generator as reseeded candidate sets: item ``index`` of set ``attempt`` (``docs/data.md``)."""

from __future__ import annotations

import copy
import dataclasses
import logging
import os
import random
from collections.abc import Iterable
from typing import Any

import numpy as np
from reasoning_gym.factory import create_dataset

__all__ = ["HASH_SEED_DEPENDENT", "INIT_SEEDED", "Candidates", "warn_unseeded_hash"]

# generators that draw from their seed when built (task lists, pre-generated questions, sub-datasets)
INIT_SEEDED = frozenset({"acre", "list_functions", "gsm_symbolic", "composite"})
# generators whose items follow PYTHONHASHSEED (a run's processes get 0: rg_verl.grpo.launch.process_env)
HASH_SEED_DEPENDENT = ("isomorphic_strings", "knight_swap", "polynomial_multiplication", "ransom_note")


def warn_unseeded_hash(names: Iterable[str], log: logging.Logger, items: str, purpose: str) -> None:
    """Warns when ``PYTHONHASHSEED`` is unset and some of ``names`` are :data:`HASH_SEED_DEPENDENT`."""
    dependent = sorted(set(names) & set(HASH_SEED_DEPENDENT))
    if dependent and os.environ.get("PYTHONHASHSEED", "random") == "random":
        log.warning(
            "PYTHONHASHSEED is not set: the %s of %s follow it, and a training run's processes get "
            "PYTHONHASHSEED=0; set PYTHONHASHSEED=0 to %s",
            items, ", ".join(dependent), purpose,
        )  # fmt: skip


def reseeded(dataset: Any, seed: int) -> Any:
    """A shallow copy of a built reasoning-gym dataset that generates as one built with ``seed`` would."""
    clone = copy.copy(dataset)
    clone.seed = seed
    config = getattr(dataset, "config", None)
    if dataclasses.is_dataclass(config) and hasattr(config, "seed"):
        clone.config = copy.copy(config)  # a few generators read config.seed (survo)
        clone.config.seed = seed
    return clone


class Candidates:
    """The candidate sets of generator ``name`` at ``config``: set ``a`` uses seeds ``seed + a * stride``."""

    def __init__(self, name: str, config: dict, seed: int, size: int, stride: int):
        self.name, self.config, self.seed, self.size, self.stride = name, dict(config), seed, size, stride
        self.sets = [create_dataset(name, **self.config, seed=seed, size=size)]

    @property
    def first(self) -> Any:
        """Set 0, the dataset as reasoning-gym builds it (its category, its scorer)."""
        return self.sets[0]

    def _set(self, attempt: int) -> Any:
        while len(self.sets) <= attempt:
            seed = self.seed + len(self.sets) * self.stride
            if self.name in INIT_SEEDED:
                self.sets.append(create_dataset(self.name, **self.config, seed=seed, size=self.size))
            else:
                self.sets.append(reseeded(self.sets[0], seed))
        return self.sets[attempt]

    def item(self, attempt: int, index: int) -> dict:
        """Item ``index`` of set ``attempt``, generated with the global random state seeded from its seed."""
        dataset = self._set(attempt)
        seed = dataset.seed + index
        state, np_state = random.getstate(), np.random.get_state()
        random.seed(seed)
        np.random.seed(seed % 2**32)
        try:
            return dataset[index]
        finally:
            random.setstate(state)
            np.random.set_state(np_state)
