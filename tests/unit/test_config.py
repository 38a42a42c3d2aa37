"""rg_verl.config: our sections are checked before Ray, and every error names field, value and fix."""

import pytest
from omegaconf import OmegaConf

from rg_verl.config import ConfigError, ReasoningGymConfig, RewardConfig, check_model_path, validate


def rg(**overrides):
    section = {"datasets": {"chain_sum": {"weight": 1.0}}, **overrides}
    return ReasoningGymConfig.from_section(section)


@pytest.mark.parametrize(
    "section, message",
    [
        ({"datasets": {"chain_sun": {}}}, r"reasoning_gym\.datasets\.chain_sun: unknown .* Did you mean 'chain_sum'"),
        ({"datasets": {"chain_sum": {"weight": -1}}}, r"chain_sum\.weight: -1 is below 0"),
        ({"datasets": {"chain_sum": {"weight": 0}}}, r"every weight is 0; give at least one dataset a positive"),
        ({"datasets": {"chain_sum": {"weight": "heavy"}}}, r"weight: 'heavy' is not a finite number"),
        ({"datasets": {"chain_sum": {"config": {"min_terms": 0}}}}, r"chain_sum\.config: reasoning-gym rejects"),
        ({"datasets": {"chain_sum": {"config": {"no_such_knob": 1}}}}, r"chain_sum\.config: reasoning-gym rejects"),
        ({"datasets": {"chain_sum": {"config": {"seed": 3}}}}, r"config\.seed: set by rg-verl"),
        ({"datasets": {"chain_sum": {"wieght": 1}}}, r"chain_sum\.wieght: unknown key \(did you mean 'weight'\?\)"),
        ({"datasets": {}}, r"reasoning_gym\.datasets: needs at least one dataset"),
        ({"datasets": {"chain_sum": {}}, "train_sise": 5}, r"reasoning_gym\.train_sise: unknown key .*'train_size'"),
        ({"datasets": {"chain_sum": {}}, "seed": -1}, r"reasoning_gym\.seed: -1 is not an integer in"),
        ({"datasets": {"chain_sum": {}}, "val_size": 0}, r"reasoning_gym\.val_size: 0 is not an integer in"),
        ({"datasets": {"chain_sum": {}}, "val_datasets": {"leg_countin": {}}}, r"val_datasets\.leg_countin: unknown"),
    ],
)
def test_reasoning_gym_section_errors(section, message):
    with pytest.raises(ConfigError, match=message):
        ReasoningGymConfig.from_section(section)


def test_reasoning_gym_section_defaults_and_mixes():
    config = rg(val_datasets={"leg_counting": {"weight": 2}})
    assert config.seed == 42 and config.train_size == 10000 and config.system_prompt == "default"
    assert list(config.mix("train")) == ["chain_sum"]
    assert list(config.mix("val")) == list(config.mix("eval")) == ["leg_counting"]
    assert config.mix("val")["leg_counting"].weight == 2.0
    assert list(rg().mix("val")) == ["chain_sum"]  # no val_datasets: validate on the training mix


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"mode": "fuzzy"}, r"reward_kwargs\.mode: 'fuzzy' is not a mode; set one of strict, lenient"),
        ({"terms": {"brevity": 1}}, r"terms\.brevity: unknown reward term; valid terms: cosine, format, length"),
        ({"terms": {"format": "lots"}}, r"terms\.format: 'lots' is not a finite number"),
        ({"terms": {"length": 0.1}}, r"set tokenizer_path and max_response_length"),
        ({"strict": True}, r"reward_kwargs\.strict: unknown key; valid keys: mode, terms"),
    ],
)
def test_reward_section_errors(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        RewardConfig.from_section(kwargs)


def test_model_path_must_be_a_directory_or_hub_id(tmp_path):
    check_model_path("m", str(tmp_path))
    check_model_path("m", "Qwen/Qwen2.5-3B-Instruct")
    for bad in [str(tmp_path / "missing"), "not a path", "", None, "a/b/c"]:
        with pytest.raises(ConfigError, match=r"m: .* (neither a local model directory nor a hub id|not a model path)"):
            check_model_path("m", bad)


def test_validate_checks_the_composed_config(tmp_path):
    config = OmegaConf.create(
        {
            "reasoning_gym": {"datasets": {"chain_sum": {}}},
            "reward": {"custom_reward_function": {"path": "pkg://rg_verl.reward", "reward_kwargs": {"mode": "x"}}},
            "actor_rollout_ref": {"model": {"path": str(tmp_path)}},
        }
    )
    with pytest.raises(ConfigError, match="mode"):
        validate(config)
    config.reward.custom_reward_function.reward_kwargs.mode = "strict"
    assert list(validate(config).datasets) == ["chain_sum"]
    config.actor_rollout_ref.model.path = str(tmp_path / "nope")
    with pytest.raises(ConfigError, match="actor_rollout_ref.model.path"):
        validate(config)


def test_curriculum_needs_an_in_process_dataloader(tmp_path):
    config = OmegaConf.create(
        {
            "reasoning_gym": {
                "datasets": {"chain_sum": {}},
                "curriculum": {"enabled": True, "levels": {"chain_sum": {"*": 1}}},
            },
            "data": {"dataloader_num_workers": 8},
            "actor_rollout_ref": {"model": {"path": str(tmp_path)}},
        }
    )
    with pytest.raises(ConfigError, match="data.dataloader_num_workers: 8 .* set data.dataloader_num_workers=0"):
        validate(config)
    config.data.dataloader_num_workers = 0
    assert validate(config).curriculum.levels == {"chain_sum": {"*": 1}}
