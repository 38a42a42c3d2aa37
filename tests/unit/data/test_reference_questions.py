"""Tests of rg_verl.data.reference_questions: reasoning-gym's own items, and the list that keeps its evaluation
questions out of the training and validation splits."""

from __future__ import annotations

import importlib.util
import random
import re

import numpy as np
import pytest
import reasoning_gym
from omegaconf import OmegaConf
from reasoning_gym.composite import DatasetSpec

from rg_verl.common.schema import ConfigError, parse_section
from rg_verl.data import reference_questions
from rg_verl.data.dataset import ReasoningGymDataset
from rg_verl.data.holdout import question_hash, split_of
from rg_verl.data.reference_questions import (
    LIST_FILE,
    ReferenceItems,
    ReferenceTraining,
    recorded_digest,
    training_questions,
)
from tests.helpers import REPO

SCRIPT = REPO / "utils" / "ship_reference_questions.py"
# a space of 10 * 10 * 2 questions: every split repeats, so every question a list could name comes up
SMALL = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}
# generators over ~20 ms an item on 2 idle cores (zebra_puzzles 403, knight_swap 354, futoshiki 235, sokoban 64,
# puzzle24 63, intermediate_integration 37, sudoku 25): the slow check of the shipped list leaves them out
SLOW_GENERATORS = {
    "zebra_puzzles", "knight_swap", "futoshiki", "sokoban", "puzzle24", "intermediate_integration", "sudoku",
}  # fmt: skip
SAMPLE_ITEMS = 50


def ship_script():
    spec = importlib.util.spec_from_file_location("ship_reference_questions", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def split(name: str, size: int = 120, datasets: dict | None = None) -> ReasoningGymDataset:
    datasets = datasets or {"chain_sum": {"weight": 1, "config": SMALL}}
    section = {"datasets": datasets, "seed": 7, f"{name}_size": size}
    return ReasoningGymDataset(f"reasoning_gym://{name}", None, OmegaConf.create({"reasoning_gym": section}))


def questions(dataset: ReasoningGymDataset) -> list[str]:
    return [dataset[i]["extra_info"]["entry"]["question"] for i in range(len(dataset))]


# ---- reasoning-gym's own items


@pytest.mark.parametrize(
    "name, params", [("chain_sum", SMALL), ("spell_backward", {"min_word_len": 3}), ("leg_counting", {})]
)
def test_reference_items_are_create_datasets_items_in_order(name, params):
    expected = list(reasoning_gym.create_dataset(name, seed=42, size=6, **params))
    items = ReferenceItems(name, params, seed=42, size=6)
    assert [items[i] for i in range(6)] == expected
    assert items.hashes() == [question_hash(e["question"]) for e in expected]
    with pytest.raises(IndexError, match="out of range"):
        items[6]


def test_reference_items_leave_the_global_random_state_as_they_find_it():
    random.seed(3)
    np.random.seed(3)
    before, np_before = random.random(), np.random.random()
    random.seed(3)
    np.random.seed(3)
    ReferenceItems("chain_sum", {}, seed=42, size=5)[4]
    assert (random.random(), np.random.random()) == (before, np_before)


def test_training_questions_are_reasoning_gyms_composite():
    mix = {"chain_sum": {"weight": 1, "config": SMALL}, "leg_counting": {"weight": 2}, "spell_backward": {}}
    training = parse_section(ReferenceTraining, {"datasets": mix, "size": 80}, "reference_training")
    specs = [DatasetSpec(name, spec["weight"], spec["config"]) for name, spec in training.datasets.items()]
    composite = reasoning_gym.create_dataset("composite", seed=1, size=80, datasets=specs)
    expected: dict[str, set[str]] = {}
    for i in range(80):
        entry = composite[i]
        expected.setdefault(entry["metadata"]["source_dataset"], set()).add(question_hash(entry["question"]))
    found = training_questions(training, ["chain_sum", "spell_backward", "jugs"])
    assert found == {"chain_sum": expected["chain_sum"], "spell_backward": expected["spell_backward"], "jugs": set()}
    assert len(found["chain_sum"]) > 5  # the picks really went through the weighted draw


def test_reference_training_keeps_its_order_and_names_bad_fields():
    mix = {"spell_backward": {"weight": 1}, "ab": {"weight": 2}}
    training = parse_section(ReferenceTraining, {"datasets": mix}, "reference_training")
    assert list(training.datasets) == ["spell_backward", "ab"]  # the composite seeds its datasets by position
    assert (training.size, training.seed) == (20000, 1)
    bad = [
        ({"chain_sun": {}}, r"reference_training\.datasets\.chain_sun: unknown reasoning-gym dataset .*'chain_sum'"),
        ({"ab": {"weight": 0}}, r"reference_training\.datasets\.ab\.weight: 0 is not a positive number"),
        ({"ab": {"config": {"seed": 3}}}, r"reference_training\.datasets\.ab\.config\.seed: the composite sets it"),
        ({"ab": {"wieght": 1}}, r"reference_training\.datasets\.ab\.wieght: unknown key"),
        ({"chain_sum": {"config": {"min_terms": 0}}}, r"reference_training\.datasets\.chain_sum\.config: reasoning"),
        ({}, r"reference_training\.datasets: needs the training mix"),
    ]
    for datasets, message in bad:
        with pytest.raises(ConfigError, match=message):
            parse_section(ReferenceTraining, {"datasets": datasets}, "reference_training")


# ---- the list keeps training and validation away from its questions


@pytest.mark.parametrize("name", ["train", "val"])
def test_a_listed_question_is_never_a_training_or_validation_item(name, monkeypatch):
    before = questions(split(name))
    assert len(set(before)) < len(before)  # the space is small: questions repeat
    listed = sorted(set(before))[::2]  # half of the questions this split holds
    monkeypatch.setattr(reference_questions, "shipped_hashes", lambda: frozenset(map(question_hash, listed)))
    after = questions(split(name))
    assert len(after) == len(before) and not set(after) & set(listed)
    assert all(split_of(q) == name for q in after)


def test_the_list_leaves_the_evaluation_split_alone(monkeypatch):
    before = questions(split("eval", size=20))
    monkeypatch.setattr(reference_questions, "shipped_hashes", lambda: frozenset(map(question_hash, before)))
    assert questions(split("eval", size=20)) == before


def test_shipped_list_is_sorted_hashes_under_a_header_of_the_current_configs():
    lines = LIST_FILE.read_text().splitlines()
    header = [line for line in lines if line.startswith("#")]
    hashes = [line for line in lines if not line.startswith("#")]
    assert lines[: len(header)] == header and "utils/ship_reference_questions.py" in "\n".join(header)
    assert hashes == sorted(set(hashes)) and all(re.fullmatch(r"[0-9a-f]{16}", h) for h in hashes)
    assert reference_questions.shipped_hashes() == frozenset(hashes)
    script = ship_script()
    entries = script.shipped_entries()
    assert recorded_digest() == reference_questions.entries_digest(entries), (
        "an evaluation config under evaluation/configs changed: "
        "run PYTHONHASHSEED=0 python utils/ship_reference_questions.py, then utils/ship_searches.py"
    )
    assert len(hashes) <= sum(script.distinct_entries(entries).values())
