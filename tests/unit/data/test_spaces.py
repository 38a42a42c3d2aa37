"""Space estimates: the estimator inverts the uniform-draw model, and the warnings name what to change."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rg_verl.common.schema import ConfigError
from rg_verl.data import spaces
from rg_verl.data.config import ReasoningGymConfig
from rg_verl.data.spaces import MIN_SAMPLES, estimate_space, space_size, space_warnings, widening_params

SPLITS = ("train", "val", "eval")
SMALL_SPACE_MIX = ["jugs", "string_splitting", "string_synthesis", "prime_factorization", "lcm", "caesar_cipher"]
# lcm of two numbers in 1..3: 9 questions, none of them in a held-out share
NO_HELD_OUT = {"min_numbers": 2, "max_numbers": 2, "min_value": 1, "max_value": 3}


def expected_distinct(space: float, samples: int) -> float:
    return space * -math.expm1(samples * math.log1p(-1 / space))


@settings(max_examples=200, deadline=None)
@given(samples=st.integers(2, 5000), distinct=st.integers(1, 5000))
def test_space_size_inverts_the_uniform_draw_model(samples, distinct):
    size = space_size(samples, distinct)
    if distinct >= samples:
        assert size is None  # no repeat: the sample cannot bound the space
    elif distinct == 1:
        assert size == 1
    else:
        assert size >= distinct
        assert abs(expected_distinct(size, samples) - distinct) < 0.01


def settings_of(names, **sizes) -> ReasoningGymConfig:
    datasets = {name: {"weight": 1} for name in names} if isinstance(names, list) else names
    return ReasoningGymConfig.from_section({"datasets": datasets, **sizes})


# Sampling stops at a wall-clock budget (1 s), which a fast generator's 2,000 samples fit in when the machine is not
# loaded. The tests of what a small space's estimate says give it all the time it needs (the large spaces keep the
# budget: 2,000 of their samples take a while, and they warn of nothing either way); the budget has a test of its own.
UNHURRIED_S = 600.0
FAST_SMALL_SPACES = ("string_splitting", "string_synthesis")


@pytest.fixture
def unhurried(monkeypatch):
    def estimate(name, *args, **kwargs):
        return estimate_space(name, *args, **kwargs, **({"budget_s": UNHURRIED_S} if name in FAST_SMALL_SPACES else {}))

    monkeypatch.setattr(spaces, "estimate_space", estimate)


def test_a_sample_of_a_small_space_estimates_its_size():
    estimate = estimate_space("string_splitting", {}, seed=7, budget_s=UNHURRIED_S)
    assert estimate.samples == 2000
    assert 200 <= estimate.total <= 235  # it has 216 questions at its defaults
    assert sum(estimate.by_split.values()) == estimate.distinct
    assert 150 < estimate.reachable("train") < estimate.total and estimate.reachable("val") < 30


def test_the_budget_stops_the_sample_but_never_below_its_minimum():
    assert estimate_space("string_splitting", {}, seed=7, budget_s=0.0).samples == MIN_SAMPLES
    assert estimate_space("string_splitting", {}, seed=7, max_samples=5, budget_s=0.0).samples == 5


def test_the_small_space_mix_warns_where_a_split_cannot_be_filled(unhurried):
    warnings = space_warnings(settings_of(SMALL_SPACE_MIX, train_size=5000, val_size=200, eval_size=200), SPLITS)
    warned = {(w.split(":")[0].rsplit(".", 1)[1], w.split(" the ")[1].split(" split")[0]) for w in warnings}
    # string_splitting and string_synthesis hold about 216 questions: about 11 per held-out share, 195 for training
    for name in ("string_splitting", "string_synthesis"):
        assert {(name, "train"), (name, "val"), (name, "eval")} <= warned
    # large spaces: no warning
    assert not {w for w in warned if w[0] in ("lcm", "caesar_cipher")}
    message = next(w for w in warnings if w.startswith("reasoning_gym.datasets.string_splitting: the val split"))
    assert "asks for about 33 items of 'string_splitting'" in message
    assert "can reach only about" in message and "estimated from 2,000 sampled questions" in message
    assert "in the val share (5%)" in message and "raise max_initial_machines in its config" in message


def test_a_space_without_held_out_questions_is_named_with_its_fix():
    mix = {"lcm": {"config": NO_HELD_OUT}, "gcd": {}}
    warnings = space_warnings(settings_of(mix, val_size=64), ("val",))
    assert len(warnings) == 1
    assert warnings[0].startswith("reasoning_gym.datasets.lcm: the val split asks for about 32 items of 'lcm'")
    assert "holds no question of the val share, so the dataset is left out of the val split" in warnings[0]
    assert "raise max_numbers, max_value in its config" in warnings[0]


def test_the_validation_mix_is_named_when_it_is_its_own():
    mix = {"gcd": {}}
    section = settings_of(mix, val_size=64)
    section.val_datasets = settings_of({"lcm": {"config": NO_HELD_OUT}, "spell_backward": {}}).datasets
    (warning,) = space_warnings(section, ("val",))
    assert warning.startswith("reasoning_gym.val_datasets.lcm: the val split")


def test_large_spaces_give_no_warning():
    assert space_warnings(settings_of(["gcd", "spell_backward"], train_size=5000), SPLITS) == []


def test_widening_params_come_from_the_curriculum_or_the_integer_fields():
    assert widening_params("jugs") == ["num_jugs", "difficulty"]
    assert "max_value" in widening_params("lcm")
    assert all(isinstance(name, str) for name in widening_params("rearc"))


def test_a_split_without_any_reachable_dataset_is_a_config_error_before_ray():
    with pytest.raises(ConfigError, match=r"reasoning_gym.datasets: no dataset of the val mix has a question"):
        space_warnings(settings_of({"lcm": {"config": NO_HELD_OUT}}, val_size=16), ("val",))
    # training still has questions there: only the held-out splits fail
    assert space_warnings(settings_of({"lcm": {"config": NO_HELD_OUT}}, train_size=4), ("train",)) == []


def test_widening_params_never_name_the_reserved_fields():
    for name in ("acre", "composite", "gsm_symbolic"):
        assert not {"seed", "size"} & set(widening_params(name))
