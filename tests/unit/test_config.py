"""rg_verl.config: our sections are checked before Ray, and every error names field, value and fix."""

import importlib.util
import re

import pytest
from omegaconf import OmegaConf

from rg_verl.config import MOVED_MODULES, ConfigError, ReasoningGymConfig, RewardConfig, check_model_path, validate


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


def test_reward_config_defaults_and_parsed_values():
    defaults = RewardConfig.from_section(None)
    assert (defaults.mode, defaults.terms, defaults.tokenizer_path) == ("lenient", {}, None)
    assert defaults.max_response_length is None and defaults.math_datasets == []
    kwargs = {"mode": "strict", "terms": {"format": 1, "length": 0.5}, "tokenizer_path": "o/t"}
    kwargs["max_response_length"] = 64
    parsed = RewardConfig.from_section(kwargs)
    assert parsed.mode == "strict" and parsed.terms == {"format": 1.0, "length": 0.5}
    assert isinstance(parsed.terms["format"], float) and parsed.max_response_length == 64
    with pytest.raises(ConfigError, match=r"^reward\.custom_reward_function\.reward_kwargs\.max_response_length: 0 is"):
        RewardConfig.from_section({"max_response_length": 0})
    with pytest.raises(ConfigError, match=r"^r\.math_datasets: unknown reasoning-gym dataset 'chain_sun'"):
        RewardConfig.from_section({"math_datasets": ["chain_sun"]}, where="r")
    assert RewardConfig.from_section({"terms": {"length": 0.0}}).terms == {"length": 0.0}  # off: no tokenizer needed


@pytest.mark.parametrize(
    "section, message",
    [
        ({"curriculum": {"enabled": "yes"}}, r"reasoning_gym\.curriculum\.enabled: 'yes' is not true or false"),
        ({"curriculum": {"success_threshold": 1.5}}, r"curriculum\.success_threshold: 1\.5 is above 1\.0"),
        ({"adaptive_weights": {"floor": 1.5}}, r"adaptive_weights\.floor: 1\.5 is above 1\.0; set a value <= 1\.0"),
        ({"adaptive_weights": {"window": 0}}, r"adaptive_weights\.window: 0 is not an integer in \[1, 1000000\]"),
        ({"adaptive_weights": {"flor": 0.5}}, r"adaptive_weights\.flor: unknown key \(did you mean 'floor'\?\)"),
        ({"system_prompt": 3}, r"reasoning_gym\.system_prompt: 3 is not text"),
        ({"seed": 10**9}, r"reasoning_gym\.seed: 1000000000 is not an integer in \[0, 999999999\]"),
    ],
)
def test_declared_limits_name_the_field(section, message):
    with pytest.raises(ConfigError, match=message):
        rg(**section)


def test_a_missing_section_says_what_to_add():
    with pytest.raises(ConfigError, match=r"^reasoning_gym: missing; add a reasoning_gym section"):
        ReasoningGymConfig.from_section(None)


def composed_minimal(tmp_path, **sections) -> OmegaConf:
    return OmegaConf.create(
        {
            "reasoning_gym": {"datasets": {"chain_sum": {}}},
            "actor_rollout_ref": {"model": {"path": str(tmp_path)}},
            **sections,
        }
    )


def test_the_v1_trainer_is_required_before_anything_is_built(tmp_path):
    # a bad model path would also fail: the trainer is checked first, so nothing else is looked at
    config = composed_minimal(tmp_path, trainer={"use_v1": False})
    config.actor_rollout_ref.model.path = str(tmp_path / "absent")
    with pytest.raises(ConfigError, match=r"^trainer\.use_v1: False; rg-verl runs on verl's V1 trainer"):
        validate(config)
    config.trainer.use_v1 = True
    config.actor_rollout_ref.model.path = str(tmp_path)
    assert list(validate(config).datasets) == ["chain_sum"]


@pytest.mark.parametrize(
    "key, path, new",
    [
        ("data.custom_cls.path", "pkg://rg_verl.dataset", "pkg://rg_verl.data.dataset"),
        ("reward.custom_reward_function.path", "pkg://rg_verl.math_answer", "pkg://rg_verl.reward.math_verify"),
        ("data.custom_cls.path", "/opt/rg-verl/rg_verl/dataset.py", "pkg://rg_verl.data.dataset"),
    ]
    + [("data.custom_cls.path", f"pkg://{old}", f"pkg://{new}") for old, new in sorted(MOVED_MODULES.items())],
)
def test_a_module_path_that_moved_names_its_new_path(tmp_path, key, path, new):
    config = composed_minimal(tmp_path)
    OmegaConf.update(config, key, path, force_add=True)
    with pytest.raises(ConfigError, match=rf"^{re.escape(key)}: '{re.escape(path)}' moved to '{re.escape(new)}'"):
        validate(config)
    OmegaConf.update(config, key, new)
    validate(config)


def test_every_new_module_path_exists():
    for new in set(MOVED_MODULES.values()):
        assert importlib.util.find_spec(new) is not None, new


def test_module_paths_of_our_package_must_exist_and_others_are_left_to_verl(tmp_path):
    config = composed_minimal(tmp_path, reward={"custom_reward_function": {"path": "pkg://rg_verl.reward"}})
    validate(config)  # the reward package exports compute_score
    config.reward.custom_reward_function.path = "pkg://rg_verl.rewards"
    with pytest.raises(ConfigError, match=r"reward\.custom_reward_function\.path: 'pkg://rg_verl\.rewards' names no"):
        validate(config)
    config.reward.custom_reward_function.path = "pkg://my_project.reward"  # someone else's module
    validate(config)


def test_a_file_path_to_a_module_that_became_a_package_names_the_package(tmp_path):
    """``.../rg_verl/reward.py`` was a file; rg_verl.reward is now a package, so verl would find no file."""
    config = composed_minimal(tmp_path, reward={"custom_reward_function": {"path": "/opt/rg-verl/rg_verl/reward.py"}})
    with pytest.raises(ConfigError, match=r"does not exist; set reward\.custom_reward_function\.path=pkg://rg_verl\.reward$"):
        validate(config)
    existing = importlib.util.find_spec("rg_verl.data.dataset").origin
    config.reward.custom_reward_function.path = "pkg://rg_verl.reward"
    OmegaConf.update(config, "data.custom_cls.path", existing)  # a real file of ours is fine
    validate(config)


def test_a_blank_mapping_or_list_means_its_empty_default():
    """``config:`` with nothing under it is YAML's null: it means {} (and [] for lists), as before."""
    settings = ReasoningGymConfig.from_section(
        {"datasets": {"chain_sum": {"config": None}}, "val_datasets": None, "curriculum": {"levels": None}}
    )
    assert settings.datasets["chain_sum"].config == {} and settings.val_datasets == {}
    assert settings.curriculum.levels == {}
    reward = RewardConfig.from_section({"terms": None, "math_datasets": None})
    assert reward.terms == {} and reward.math_datasets == []
    with pytest.raises(ConfigError, match=r"^reasoning_gym\.datasets: needs at least one dataset"):
        ReasoningGymConfig.from_section({"datasets": None})
