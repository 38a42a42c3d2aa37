"""Curriculum levels and adaptive weights: the rules, the dataset they drive, and their saved state."""


import pytest
from hypothesis import given
from hypothesis import strategies as st
from omegaconf import OmegaConf
from torchdata.stateful_dataloader import StatefulDataLoader

from rg_verl.common.schema import ConfigError
from rg_verl.data.config import ReasoningGymConfig
from rg_verl.data.curriculum import MixState, adaptive_weights
from rg_verl.data.dataset import ReasoningGymDataset


def section(curriculum=None, adaptive=None, **datasets):
    datasets = datasets or {"chain_sum": {"weight": 1.0}, "leg_counting": {"weight": 1.0}}
    return {
        "datasets": datasets,
        "train_size": 64,
        "val_size": 8,
        "curriculum": curriculum or {},
        "adaptive_weights": adaptive or {},
    }


def state(**curriculum) -> MixState:
    config = ReasoningGymConfig.from_section(
        section({"enabled": True, "levels": {"chain_sum": {"*": 1}}, "last_k": 4, "min_samples": 4, **curriculum})
    )
    return MixState(config.datasets, config.curriculum, config.adaptive_weights)


def test_success_raises_the_level_once_the_window_is_full():
    mix = state()
    assert mix.levels("chain_sum") == {"num_terms": 1, "num_digits": 1}
    assert mix.update({"chain_sum": [1.0, 1.0, 1.0]}) == []  # 3 < min_samples: no decision yet
    assert mix.update({"chain_sum": [1.0]}) == ["chain_sum"]
    assert mix.levels("chain_sum") == {"num_terms": 2, "num_digits": 2}
    assert list(mix.results["chain_sum"]) == []  # the new level is judged on its own results


def test_failure_lowers_the_level_and_middling_keeps_it():
    mix = state()
    assert mix.update({"chain_sum": [0.0, 1.0, 1.0, 0.0]}) == []  # 0.5: between the thresholds
    assert mix.levels("chain_sum")["num_terms"] == 1
    assert mix.update({"chain_sum": [0.0] * 4}) == ["chain_sum"]
    assert mix.levels("chain_sum") == {"num_terms": 0, "num_digits": 0}
    assert mix.update({"chain_sum": [0.0] * 4}) == []  # already at the lowest level
    assert list(mix.results["chain_sum"]) == []  # a decision all the same: the next one waits for a fresh window
    assert mix.update({"chain_sum": [1.0] * 3}) == []  # 3 < min_samples


def test_a_rate_equal_to_a_threshold_is_no_decision():
    """reasoning-gym's trainer moves a level only past a threshold (> and <) and keeps the window otherwise."""
    mix = state(success_threshold=0.75, failure_threshold=0.25)
    assert mix.update({"chain_sum": [0.0, 1.0, 1.0, 1.0]}) == []  # exactly 0.75
    assert mix.update({"chain_sum": [1.0]}) == ["chain_sum"]  # the last 4: 1.0
    assert mix.update({"chain_sum": [1.0, 0.0, 0.0, 0.0]}) == []  # exactly 0.25
    assert len(mix.results["chain_sum"]) == 4 and mix.levels("chain_sum")["num_terms"] == 2


def test_datasets_without_curriculum_are_left_alone():
    mix = state()
    assert mix.update({"leg_counting": [1.0] * 10}) == []
    assert "curriculum/leg_counting/level" not in mix.metrics()
    assert mix.metrics()["curriculum/leg_counting/success_rate"] == 1.0


def test_fixed_schedule_raises_the_level_every_n_steps_whatever_the_scores():
    mix = state(schedule_every=2)
    assert mix.update({"chain_sum": [0.0] * 4}) == []
    assert mix.update({"chain_sum": [0.0] * 4}) == ["chain_sum"]
    assert mix.levels("chain_sum")["num_terms"] == 2


def test_level_change_moves_what_the_dataset_generates():
    config = OmegaConf.create(
        {
            "reasoning_gym": section(
                {"enabled": True, "levels": {"chain_sum": {"*": 0}}, "last_k": 4, "min_samples": 4},
                chain_sum={"weight": 1.0},
            )
        }
    )
    dataset = ReasoningGymDataset("reasoning_gym://train", None, config)
    before = {dataset[i]["extra_info"]["entry"]["metadata"]["num_terms"] for i in range(16)}
    assert before == {2}
    for _ in range(3):
        assert dataset.update({"chain_sum": [1.0] * 4}) == ["chain_sum"]
    after = [dataset[i]["extra_info"]["entry"]["metadata"] for i in range(16)]
    assert max(m["num_terms"] for m in after) == 5  # level 3 of num_terms, inclusive ranges
    assert max(m["num_digits"] for m in after) == 4


def test_validation_split_ignores_the_curriculum():
    config = OmegaConf.create(
        {"reasoning_gym": section({"enabled": True, "levels": {"chain_sum": {"*": 5}}}, chain_sum={})}
    )
    val = ReasoningGymDataset("reasoning_gym://val", None, config)
    assert val.state.curricula == {}


@pytest.mark.parametrize(
    "curriculum, message",
    [
        ({"enabled": True}, r"curriculum\.levels: the curriculum is enabled but lists no dataset"),
        ({"levels": {"spell_backward": {"*": 0}}}, r"levels\.spell_backward: not in reasoning_gym\.datasets"),
        ({"levels": {"chain_sum": {"num_term": 1}}}, r"levels\.chain_sum\.num_term: unknown attribute; valid: \*"),
        ({"levels": {"chain_sum": {"num_terms": 99}}}, r"levels\.chain_sum\.num_terms: 99 is not an integer in"),
        ({"last_k": 4, "min_samples": 8}, r"curriculum\.min_samples: 8 exceeds last_k=4"),
        ({"success_threshold": 0.1, "failure_threshold": 0.5}, r"need failure_threshold < success_threshold"),
        ({"lastk": 3}, r"curriculum\.lastk: unknown key \(did you mean 'last_k'\?\)"),
    ],
)
def test_curriculum_config_errors(curriculum, message):
    with pytest.raises(ConfigError, match=message):
        ReasoningGymConfig.from_section(section(curriculum))


# --- adaptive weights ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "success, expected",
    [
        ({"a": 0.5, "b": 0.5}, {"a": 0.5, "b": 0.5}),
        ({"a": 0.5, "b": 1.0}, {"a": 0.9, "b": 0.1}),  # the solved dataset keeps only its floor
        ({"a": 0.0, "b": 1.0}, {"a": 0.5, "b": 0.5}),  # nothing informative: configured weights
        ({"a": 1.0, "b": 1.0}, {"a": 0.5, "b": 0.5}),  # all solved
        ({"a": 0.0, "b": 0.0}, {"a": 0.5, "b": 0.5}),  # all failed
        ({"a": None, "b": 0.9}, {"a": 0.1 + 0.8 * 0.25 / 0.34, "b": 0.1 + 0.8 * 0.09 / 0.34}),  # unmeasured = 0.5
    ],
)
def test_adaptive_weight_rule(success, expected):
    assert adaptive_weights({"a": 1.0, "b": 1.0}, success, floor=0.2) == pytest.approx(expected)


@given(
    st.dictionaries(st.sampled_from("abcde"), st.floats(0.01, 10), min_size=1),
    st.floats(0, 1),
    st.data(),
)
def test_adaptive_weights_sum_to_one_and_respect_the_floor(base, floor, data):
    success = {name: data.draw(st.one_of(st.none(), st.floats(0, 1))) for name in base}
    weights = adaptive_weights(base, success, floor)
    total = sum(base.values())
    assert sum(weights.values()) == pytest.approx(1.0)
    for name, weight in weights.items():
        assert weight >= floor * base[name] / total - 1e-12


def test_adaptive_weights_move_the_training_mix():
    config = OmegaConf.create(
        {"reasoning_gym": section(adaptive={"enabled": True, "window": 8, "min_samples": 4, "floor": 0.1})}
    )
    dataset = ReasoningGymDataset("reasoning_gym://train", None, config)
    dataset.update({"chain_sum": [1.0] * 8, "leg_counting": [0.0, 1.0] * 4})
    assert dataset.weights["leg_counting"] == pytest.approx(0.95)
    picked = [dataset.pick(i) for i in range(400)]
    assert picked.count("leg_counting") > 340


# --- state ---------------------------------------------------------------------------------------


def test_state_round_trips_through_the_dataloader_checkpoint():
    def make():
        config = OmegaConf.create(
            {
                "reasoning_gym": section(
                    {"enabled": True, "levels": {"chain_sum": {"*": 0}}, "last_k": 4, "min_samples": 2},
                    {"enabled": True, "window": 4, "min_samples": 2},
                )
            }
        )
        dataset = ReasoningGymDataset("reasoning_gym://train", None, config)
        return dataset, StatefulDataLoader(dataset, batch_size=4, collate_fn=lambda items: items)

    dataset, loader = make()
    iterator = iter(loader)
    next(iterator)
    dataset.update({"chain_sum": [1.0, 1.0], "leg_counting": [1.0, 0.0, 1.0]})
    saved = loader.state_dict()
    expected_next = [item["extra_info"]["entry"] for item in next(iterator)]

    restored, restored_loader = make()
    restored_loader.load_state_dict(saved)
    resumed = [item["extra_info"]["entry"] for item in next(iter(restored_loader))]
    assert restored.state.state_dict() == dataset.state.state_dict()
    assert restored.state.levels("chain_sum") == {"num_terms": 1, "num_digits": 1}
    assert resumed == expected_next  # same data position, same level, same items
