"""rg_verl.grpo.metrics: categories, per-category and per-dataset means, self-correction rates."""

import math

import numpy as np
import pytest
from reasoning_gym.factory import DATASETS

from rg_verl.data.dataset import ReasoningGymDataset
from rg_verl.grpo.metrics import category_means, dataset_category, grouped_means, self_correction_rates


@pytest.mark.parametrize(
    "name, category",
    [
        ("chain_sum", "arithmetic"),
        ("basic_arithmetic", "arithmetic"),
        ("gsm_symbolic", "arithmetic"),  # reasoning_gym.arithmetic.gsm_symbolic.gsm_symbolic
        ("acre", "induction"),  # reasoning_gym.induction.acre.acre
        ("word_sorting", "algorithmic"),
        ("knight_swap", "games"),
        ("propositional_logic", "logic"),
        ("rubiks_cube", "cognition"),
        ("arc_agi", "arc"),
        ("composite", "other"),  # reasoning_gym.composite: no category package
    ],
)
def test_dataset_category(name, category):
    assert dataset_category(name) == category


def test_dataset_category_matches_reasoning_gym_for_every_dataset():
    # reasoning-gym's own ProceduralDataset.category, which the dataset puts in extra_info["category"]
    for name, (cls, _) in DATASETS.items():
        assert dataset_category(name) == cls.category.fget(cls.__new__(cls)), name


def test_dataset_category_matches_item_extra_info():
    ds = ReasoningGymDataset(
        "reasoning_gym://val",
        config={"reasoning_gym": {"datasets": {"chain_sum": {}, "word_sorting": {}, "maze": {}}, "val_size": 12}},
    )
    for i in range(len(ds)):
        info = ds[i]["extra_info"]
        assert dataset_category(info["dataset"]) == info["category"]


def test_dataset_category_unknown_name():
    with pytest.raises(ValueError, match="Unknown reasoning-gym dataset 'nope'"):
        dataset_category("nope")


V = "val-core/reasoning_gym"
A = "val-aux/reasoning_gym"
T = "train/reasoning_gym"


@pytest.mark.parametrize(
    "metrics, expected",
    [
        pytest.param({}, {}, id="empty"),
        pytest.param(
            {f"{V}/chain_sum/reward/mean@1": 0.25},
            {f"{V}/category/arithmetic/reward/mean@1": 0.25},
            id="one-dataset",
        ),
        pytest.param(
            # mean of the dataset means: each dataset counts once
            {f"{V}/chain_sum/reward/mean@1": 1.0, f"{V}/basic_arithmetic/reward/mean@1": 0.5},
            {f"{V}/category/arithmetic/reward/mean@1": 0.75},
            id="two-datasets-one-category",
        ),
        pytest.param(
            {
                f"{V}/chain_sum/reward/mean@1": 1.0,
                f"{V}/word_sorting/reward/mean@1": 0.0,
                f"{V}/maze/reward/mean@1": 0.5,
                f"{V}/leg_counting/reward/mean@1": 0.0,
            },
            {
                f"{V}/category/arithmetic/reward/mean@1": 0.5,
                f"{V}/category/algorithmic/reward/mean@1": 0.0,
                f"{V}/category/games/reward/mean@1": 0.5,
            },
            id="several-categories",
        ),
        pytest.param(
            # section and every part after the dataset are kept, including metric names with "/"
            {
                f"{A}/chain_sum/accuracy/mean@4": 0.5,
                f"{A}/chain_sum/reward/best@2/mean": 0.75,
                f"{A}/basic_arithmetic/reward/best@2/mean": 0.25,
                f"{V}/chain_sum/reward/mean@4": 0.5,
            },
            {
                f"{A}/category/arithmetic/accuracy/mean@4": 0.5,
                f"{A}/category/arithmetic/reward/best@2/mean": 0.5,
                f"{V}/category/arithmetic/reward/mean@4": 0.5,
            },
            id="sections-and-nested-metric-names",
        ),
        pytest.param(
            # a key is averaged only over the datasets that have it
            {f"{A}/chain_sum/format_ok/mean@1": 1.0, f"{A}/basic_arithmetic/score/mean@1": 0.0},
            {f"{A}/category/arithmetic/format_ok/mean@1": 1.0, f"{A}/category/arithmetic/score/mean@1": 0.0},
            id="keys-per-dataset",
        ),
        pytest.param(
            # the trainer's training reward metrics: train/<data_source>/<key>
            {f"{T}/chain_sum/score": 1.0, f"{T}/products/score": 0.0, f"{T}/chain_sum/accuracy": 1.0},
            {f"{T}/category/arithmetic/score": 0.5, f"{T}/category/arithmetic/accuracy": 1.0},
            id="train-metrics",
        ),
        pytest.param(
            {
                "val-aux/num_turns/min": 2,  # not per data source
                "val-core/other_source/reward/mean@1": 1.0,  # not reasoning-gym
                f"{V}/not_a_dataset/reward/mean@1": 1.0,  # unknown dataset
                f"{V}/category/arithmetic/reward/mean@1": 0.0,  # already a category key
                f"{V}/chain_sum": 1.0,  # too short
                f"{V}/chain_sum/reward/mean@1": "text",  # not a number
                "train/reasoning_gym/chain_sum/score": None,  # not a number
                "timing_s/step": 1.0,
            },
            {},
            id="ignored-keys",
        ),
        pytest.param(
            # numpy scalars, as verl's metrics are
            {f"{V}/chain_sum/reward/mean@1": np.float64(0.5), f"{V}/products/reward/mean@1": np.float32(1.0)},
            {f"{V}/category/arithmetic/reward/mean@1": 0.75},
            id="numpy-values",
        ),
    ],
)
def test_category_means(metrics, expected):
    before = dict(metrics)
    result = category_means(metrics)
    assert result == pytest.approx(expected)
    assert all(type(v) is float for v in result.values())
    assert metrics == before  # not modified


def test_category_means_nan_propagates():
    result = category_means({f"{T}/chain_sum/score": float("nan"), f"{T}/products/score": 1.0})
    assert list(result) == [f"{T}/category/arithmetic/score"]
    assert math.isnan(result[f"{T}/category/arithmetic/score"])


def test_category_means_is_idempotent_on_its_output():
    metrics = {f"{V}/chain_sum/reward/mean@1": 1.0, f"{V}/maze/reward/mean@1": 0.0}
    merged = {**metrics, **category_means(metrics)}
    assert category_means(merged) == category_means(metrics)


def test_category_means_of_grouped_training_metrics():
    # the trainer's path: per-dataset means (grouped_means), then their category means
    sources = ["reasoning_gym/chain_sum"] * 3 + ["reasoning_gym/products", "reasoning_gym/maze"]
    per_dataset = grouped_means(sources, {"score": [1.0, 1.0, 0.0, 0.0, 1.0]})
    assert category_means(per_dataset) == pytest.approx(
        {f"{T}/category/arithmetic/score": (2 / 3 + 0.0) / 2, f"{T}/category/games/score": 1.0}
    )


def test_self_correction_rate_is_the_share_of_revising_responses_that_self_corrected():
    metrics = {
        "val-aux/reasoning_gym/chain_sum/revised/mean@4": 0.5,
        "val-aux/reasoning_gym/chain_sum/self_corrected/mean@4": 0.125,
        "val-aux/reasoning_gym/chain_sum/revised/mean@2": 0.25,
        "val-aux/reasoning_gym/chain_sum/self_corrected/mean@2": 0.25,
        # nothing revised: no rate (not 0/0)
        "val-aux/math/gsm8k/revised/mean@4": 0.0,
        "val-aux/math/gsm8k/self_corrected/mean@4": 0.0,
        # other statistics of the flags are not rates
        "val-aux/reasoning_gym/chain_sum/revised/std@4": 0.3,
        "val-core/reasoning_gym/chain_sum/reward/mean@4": 1.0,
    }
    assert self_correction_rates(metrics) == {
        "val-aux/reasoning_gym/chain_sum/self_correction_rate/mean@4": pytest.approx(0.25),
        "val-aux/reasoning_gym/chain_sum/self_correction_rate/mean@2": pytest.approx(1.0),
    }


def test_grouped_means_keeps_sources_apart():
    sources = ["math/gsm8k", "reasoning_gym/chain_sum", "math/gsm8k"]
    assert grouped_means(sources, {"accuracy": [1, 0, 0]}) == {
        "train/math/gsm8k/accuracy": 0.5,
        "train/reasoning_gym/chain_sum/accuracy": 0.0,
    }
