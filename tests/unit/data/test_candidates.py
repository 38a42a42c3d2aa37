"""Candidate sets: a reseeded copy generates what a fresh build would, and the global random state does not leak."""

import random

import numpy as np
import pytest
from reasoning_gym.factory import create_dataset

from rg_verl.data.candidates import Candidates

STRIDE = 1000


def fresh(name: str, seed: int, index: int, size: int = 8) -> dict:
    """Item ``index`` of a dataset built with ``seed``, the global random state seeded as Candidates seeds it."""
    random.seed(seed + index)
    np.random.seed((seed + index) % 2**32)
    return create_dataset(name, seed=seed, size=size)[index]


def same_items(name: str, seed: int = 11, size: int = 8) -> None:
    candidates = Candidates(name, {}, seed, size, STRIDE)
    for attempt, index in ((0, 0), (1, 3), (2, 1)):
        assert candidates.item(attempt, index) == fresh(name, seed + attempt * STRIDE, index, size), (name, attempt)


@pytest.mark.parametrize("name", ["chain_sum", "survo", "sentence_reordering", "list_functions", "gsm_symbolic"])
def test_a_candidate_set_generates_what_a_fresh_build_with_its_seed_would(name):
    same_items(name)


def test_a_copy_shares_what_set_zero_loaded_and_init_seeded_generators_are_built_afresh():
    candidates = Candidates("chain_sum", {}, 5, 8, STRIDE)
    candidates.item(3, 0)
    assert len(candidates.sets) == 4
    assert candidates.sets[2].seed == 5 + 2 * STRIDE and candidates.first.seed == 5
    init_seeded = Candidates("list_functions", {}, 5, 8, STRIDE)
    init_seeded.item(1, 0)
    # its task list is drawn when built: set 1 has the list of a build with set 1's seed
    assert init_seeded.sets[1].task_indices == create_dataset("list_functions", seed=5 + STRIDE, size=8).task_indices


def test_the_callers_global_random_state_is_kept_and_does_not_change_items():
    candidates = Candidates("list_functions", {}, 21, 16, STRIDE)
    random.seed(1)
    np.random.seed(1)
    first = [candidates.item(0, i) for i in range(16)]
    after_random, after_numpy = random.random(), np.random.random()
    random.seed(1)
    np.random.seed(1)
    assert (random.random(), np.random.random()) == (after_random, after_numpy)  # the state was restored
    random.seed(999)
    np.random.seed(999)
    assert [candidates.item(0, i) for i in range(16)] == first  # other global states: the same items
