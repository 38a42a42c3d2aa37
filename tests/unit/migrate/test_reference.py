"""The reference's own sections (reasoning_gym, curriculum, reward) in rg-verl's schema (rg_verl.migrate.reference).

Each test writes a config in the reference's schema (reasoning-gym's training/, commit 49b0713) and checks
what :func:`rg_verl.migrate.command.migrate` makes of it. tests/unit/migrate/test_command.py composes and checks the
results.
"""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reasoning_gym.factory import create_curriculum

from rg_verl.migrate.command import migrate
from rg_verl.migrate.reference import TERMS, starting_config

KWARGS = ("reward", "custom_reward_function", "reward_kwargs")


def section(new: dict, *path: str):
    for key in path:
        new = new.get(key, {})
    return new


def keys(unmapped) -> list[str]:
    return [key for key, _ in unmapped]


# --- reasoning_gym


def test_reasoning_gym_maps_size_prompt_and_mix():
    old = {
        "reasoning_gym": {
            "dataset_size": 640,
            "developer_prompt": "DeepSeekZero",
            "datasets": {"leg_counting": {"weight": 1, "config": {"max_animals": 4}}, "chain_sum": {"weight": 3}},
        }
    }
    new, unmapped = migrate(old)
    assert new["reasoning_gym"] == {
        "datasets": {"leg_counting": {"weight": 1, "config": {"max_animals": 4}}, "chain_sum": {"weight": 3}},
        "train_size": 640,
        "system_prompt": "DeepSeekZero",
    }
    # the size is mapped; the reference's validation size (the same number) is what the report adds
    (why,) = [why for key, why in unmapped if key == "reasoning_gym.dataset_size"]
    assert "reasoning_gym.val_size" in why and "640" in why


def test_a_prompt_that_is_no_system_prompts_key_is_reported_and_kept_as_text():
    new, unmapped = migrate({"reasoning_gym": {"developer_prompt": "Answer briefly.", "datasets": {"ab": {}}}})
    assert new["reasoning_gym"]["system_prompt"] == "Answer briefly."
    assert "reasoning_gym.developer_prompt" in keys(unmapped)


def test_dataset_entries_lose_what_rg_verl_sets_and_report_unknown_keys():
    old = {"reasoning_gym": {"datasets": {"ab": {"weight": 2, "config": {"seed": 5, "size": 9, "length": 8}, "x": 1}}}}
    new, unmapped = migrate(old)
    assert new["reasoning_gym"]["datasets"] == {"ab": {"weight": 2, "config": {"length": 8}}}
    assert {"reasoning_gym.datasets.ab.config.seed", "reasoning_gym.datasets.ab.config.size"} <= set(keys(unmapped))
    assert "reasoning_gym.datasets.ab.x" in keys(unmapped)


# --- curriculum


def curriculum(**overrides) -> dict:
    section = {
        "enabled": True,
        "schedule": {"automatic": False, "update_steps": 30},
        "last_k": 256,
        "success_threshold": 0.8,
        "failure_threshold": 0.2,
        "curricula": {"chain_sum": {"attribute_levels": {"num_terms": 1, "num_digits": 0}, "weight": 2.0}},
    }
    return {"reasoning_gym": {"dataset_size": 64, "datasets": None}, "curriculum": {**section, **overrides}}


def test_an_enabled_curriculum_maps_its_rule_and_trains_on_its_datasets_at_the_starting_levels():
    new, unmapped = migrate(curriculum())
    assert new["reasoning_gym"]["curriculum"] == {
        "enabled": True,
        "last_k": 256,
        "min_samples": 256,  # the reference decides only on a full window of last_k samples
        "success_threshold": 0.8,
        "failure_threshold": 0.2,
        "levels": {"chain_sum": {"num_terms": 1, "num_digits": 0}},
    }
    # chain_sum's curriculum: num_terms levels 2, 3, ... (level 1: 2 to 3 terms), num_digits 1, 2, ... (level 0: 1)
    config = {"min_terms": 2, "max_terms": 3, "min_digits": 1, "max_digits": 1}
    assert new["reasoning_gym"]["datasets"] == {"chain_sum": {"weight": 2.0, "config": config}}
    assert new["data"]["dataloader_num_workers"] == 0
    # automatic: false is the threshold rule; update_steps was never read
    assert "schedule_every" not in new["reasoning_gym"]["curriculum"]
    assert "curriculum.schedule.update_steps" in keys(unmapped)


def test_an_automatic_schedule_becomes_schedule_every():
    new, unmapped = migrate(curriculum(schedule={"automatic": True, "update_steps": 30}))
    assert new["reasoning_gym"]["curriculum"]["schedule_every"] == 30
    assert not [key for key in keys(unmapped) if key.startswith("curriculum")]


def test_an_enabled_curriculum_replaces_the_mix_the_reference_ignored():
    old = curriculum()
    old["reasoning_gym"]["datasets"] = {"leg_counting": {"weight": 1}}
    new, unmapped = migrate(old)
    assert list(new["reasoning_gym"]["datasets"]) == ["chain_sum"]
    assert "reasoning_gym.datasets" in keys(unmapped)


def test_a_disabled_curriculum_is_reported_once_and_not_carried_over():
    old = {"reasoning_gym": {"datasets": {"ab": {}}}, "curriculum": {**curriculum()["curriculum"], "enabled": False}}
    new, unmapped = migrate(old)
    assert "curriculum" not in new["reasoning_gym"] and "dataloader_num_workers" not in new.get("data", {})
    assert keys(unmapped) == ["curriculum"]


def test_unknown_curriculum_keys_are_reported():
    old = curriculum(bogus=1, schedule={"automatic": True, "update_steps": 3, "every": 2})
    old["curriculum"]["curricula"]["chain_sum"]["extra"] = 1
    _, unmapped = migrate(old)
    assert {"curriculum.bogus", "curriculum.schedule.every", "curriculum.curricula.chain_sum.extra"} <= set(
        keys(unmapped)
    )


@pytest.mark.parametrize("name", ["knights_knaves", "spell_backward", "chain_sum"])
def test_the_starting_config_is_what_the_curriculum_generates(name):
    curriculum = create_curriculum(name)
    generated = vars(curriculum.generate_configuration())
    start = starting_config(name, {"*": 0})
    assert start and all(generated[field] == value for field, value in start.items())
    assert not {"seed", "size"} & set(start)
    assert starting_config("no_such_dataset", {"*": 0}) == {} and starting_config(name, {"no_attr": 1}) == {}


# --- reward


def test_secondary_rewards_become_the_reference_terms_and_switch_ours_off():
    old = {
        "reasoning_gym": {"datasets": {"ab": {}}},
        "reward": {
            "use_accuracy": True,
            "secondary_rewards": [
                {"name": "format", "scaling_factor": 0.2, "kwargs": {"preappend_thinking_token": True}},
                {"name": "length", "scaling_factor": 0.2, "kwargs": {"max_output_length": 2048}},
                {"name": "cosine", "scaling_factor": 0.3},
            ],
        },
    }
    new, unmapped = migrate(old)
    kwargs = section(new, *KWARGS)
    # grpo_3b weights our format and length terms: the reference's run had neither
    assert kwargs["terms"] == {
        "format": 0.0,
        "length": 0.0,
        "reference_format": 0.2,
        "reference_length": 0.2,
        "reference_cosine": 0.3,
    }
    assert kwargs["reference_terms"] == {"preappend_thinking_token": True, "max_output_length": 2048}
    assert unmapped == []


def test_reward_options_at_the_reference_defaults_are_not_written():
    rewards = [{"name": "format", "scaling_factor": 0.2, "kwargs": {"preappend_thinking_token": False}}]
    new, _ = migrate({"reasoning_gym": {"datasets": {"ab": {}}}, "reward": {"secondary_rewards": rewards}})
    assert "reference_terms" not in section(new, *KWARGS)


def test_reward_keys_without_an_equivalent_are_reported():
    rewards = [
        {"name": "brevity", "scaling_factor": 1.0},
        {"name": "length", "kwargs": {"max_score": 2.0, "colour": "red"}, "extra": 1},
    ]
    new, unmapped = migrate({"reward": {"use_accuracy": False, "secondary_rewards": rewards}})
    assert set(keys(unmapped)) == {
        "reward.use_accuracy",
        "reward.secondary_rewards[0]",
        "reward.secondary_rewards[1].extra",
        "reward.secondary_rewards[1].kwargs.max_score",
        "reward.secondary_rewards[1].kwargs.colour",
    }
    assert section(new, *KWARGS, "terms")["reference_length"] == 1.0  # a missing scaling_factor is 1


ENTRIES = st.fixed_dictionaries(
    {"name": st.sampled_from([*TERMS, "other"])},
    optional={"scaling_factor": st.floats(0, 2, allow_nan=False), "kwargs": st.dictionaries(st.sampled_from(
        ["preappend_thinking_token", "max_output_length", "max_score", "x"]), st.integers(1, 4096) | st.booleans())},
)  # fmt: skip


@settings(max_examples=50, deadline=None)
@given(st.lists(ENTRIES, max_size=5))
def test_any_list_of_secondary_rewards_gives_the_summed_weights_and_never_raises(entries):
    new, unmapped = migrate({"reward": {"secondary_rewards": entries}})
    terms = section(new, *KWARGS, "terms")
    for name, term in TERMS.items():
        weight = sum(e.get("scaling_factor", 1.0) for e in entries if e["name"] == name)
        assert terms.get(term, 0.0) == pytest.approx(weight)
    unknown = [f"reward.secondary_rewards[{i}]" for i, e in enumerate(entries) if e["name"] == "other"]
    assert set(unknown) <= set(keys(unmapped))
