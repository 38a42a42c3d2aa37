"""A reasoning-gym generator as candidate sets: item ``index`` of set ``attempt``, reproducibly.

``rg_verl.data.dataset`` searches candidate sets ``0, 1, ...`` of a generator for a question in its
split's share; set ``a`` holds the items of seeds ``seed + a * stride + [0, size)``. Two things make
this cheaper and more reproducible than building one reasoning-gym dataset per set:

- **Reseeded copies.** Most generators draw item ``j`` from ``Random(self.seed + j)`` and nothing else,
  while some load data files when built (``arc_agi`` about 20 s, ``group_anagrams`` 17 s). Set ``a`` is
  then a shallow copy of set 0 with its seed changed, sharing what was loaded. The few generators that
  draw from their seed when built (``INIT_SEEDED``) are built afresh for each set; a test checks every
  registered generator against a fresh build.
- **Global random state.** A few generators also draw from the module-level ``random`` or
  ``numpy.random`` (``list_functions``, parts of ``codeio``), so their items would follow whatever ran
  before. Each candidate is generated with both seeded from its own seed, and the caller's state is
  restored afterwards.
"""

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
# generators whose items follow PYTHONHASHSEED (tests/unit/data/test_dataset_determinism.py); a run's
# processes get PYTHONHASHSEED=0 (rg_verl.grpo.launch.process_env)
HASH_SEED_DEPENDENT = ("isomorphic_strings", "knight_swap", "polynomial_multiplication", "ransom_note")


def warn_unseeded_hash(names: Iterable[str], log: logging.Logger, items: str, purpose: str) -> None:
    """Warns through ``log`` when this process draws the items of some of ``names`` unlike a run's processes:
    those of :data:`HASH_SEED_DEPENDENT` when ``PYTHONHASHSEED`` is not set (a run's processes get 0)."""
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
    """The candidate sets of generator ``name`` at ``config``: set ``a`` uses seeds ``seed + a * stride``.

    Args:
        name: the reasoning-gym dataset.
        config: its config keyword arguments (not seed or size).
        seed: the seed of set 0.
        size: the size each set is built with (a few generators use it).
        stride: the seed distance between sets.
    """

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
