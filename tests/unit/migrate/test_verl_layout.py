"""verl's old ppo_trainer layout in verl 0.9.1's terms (rg_verl.migrate.verl_layout): renamed, removed, never read,
unknown."""

import pytest

from rg_verl.migrate.command import default_config, migrate
from rg_verl.migrate.tree import MISSING, flatten, get, known
from rg_verl.migrate.verl_layout import (
    NOT_READ,
    OLD_VALUES,
    OLD_VERL_DEFAULTS,
    REMOVED,
    RENAMED,
    RENAMED_PREFIXES,
    REWARD_MODEL_KEYS,
    new_name,
)

MIX = {"reasoning_gym": {"datasets": {"ab": {}}}}
# sections a GRPO run with no reward model never builds, and the old reward function the reference ignored
SKIPPED_SECTIONS = ("critic.", "reward_model.", "custom_reward_function.")


def keys(unmapped) -> list[str]:
    return [key for key, _ in unmapped]


@pytest.fixture(scope="module")
def defaults() -> dict:
    return default_config()


def test_every_old_default_has_a_rule(defaults):
    """Each key of verl's old defaults is kept, renamed, removed, never read or in a skipped section: none is lost
    without a rule (a key the file itself writes and no rule knows is reported as unknown)."""
    ruled = set(REMOVED) | set(NOT_READ) | {"trainer.remove_previous_ckpt_in_save"}
    unruled = [
        path
        for path in flatten(OLD_VERL_DEFAULTS)
        if path not in ruled and not path.startswith(SKIPPED_SECTIONS) and not known(defaults, new_name(path))
    ]
    assert not unruled


def test_renamed_keys_are_gone_from_verl_0_9_1_and_their_new_names_are_there(defaults):
    for old, new in RENAMED.items():  # gone, or kept as a deprecated spelling that defaults to null
        assert get(defaults, old) in (MISSING, None) and known(defaults, new), (old, new)
    for old, new in RENAMED_PREFIXES.items():
        assert get(defaults, old.rstrip(".")) is not None and known(defaults, new.rstrip(".")), (old, new)
    for path in [*REMOVED, *OLD_VALUES, *REWARD_MODEL_KEYS.values()]:
        assert known(defaults, path) != (path in REMOVED), path


def test_old_keys_take_their_new_names_and_values():
    old = {
        **MIX,
        "actor_rollout_ref": {
            "actor": {"optim": {"warmup_style": "cosine", "min_lr_ratio": None}},
            "rollout": {"load_format": "dummy_dtensor"},
        },
        "trainer": {
            "val_generations_to_log_to_wandb": 4,
            "remove_previous_ckpt_in_save": True,
            "resume_from_path": False,
        },
    }
    new, unmapped = migrate(old)
    assert new["actor_rollout_ref"] == {"actor": {"optim": {"lr_scheduler_type": "cosine"}}}  # dummy is 0.9.1's
    assert new["trainer"] == {"log_val_generations": 4, "max_actor_ckpt_to_keep": 1, "max_critic_ckpt_to_keep": 1}
    assert unmapped == []


@pytest.mark.parametrize("value, lost", [(False, True), (True, False)])
def test_a_removed_key_is_reported_with_whether_anything_is_lost(value, lost):
    new, unmapped = migrate({**MIX, "actor_rollout_ref": {"rollout": {"use_fire_sampling": value}}})
    (why,) = [why for key, why in unmapped if key == "actor_rollout_ref.rollout.use_fire_sampling"]
    assert ("nothing is lost" in why) == lost
    assert "actor_rollout_ref" not in new


def test_keys_the_reference_never_read_are_reported_only_when_they_say_something():
    old = {**MIX, "data": {"train_files": "train.parquet", "prompt_key": "prompt", "val_batch_size": 64}}
    new, unmapped = migrate(old)
    assert "data" not in new
    assert keys(unmapped) == ["data.train_files", "data.val_batch_size"]  # prompt_key is our default too


def test_verl_0_9_1_keys_and_unknown_keys():
    old = {
        **MIX,
        "actor_rollout_ref": {"rollout": {"enforce_eager": True, "engine_kwargs": {"vllm": {"swap_space": 4}}}},
        "trainer": {"no_such_knob": 3, "total_epochs": 30},
        "totally_new_section": {"a": 1},
    }
    new, unmapped = migrate(old)
    assert new["actor_rollout_ref"]["rollout"] == {"enforce_eager": True, "engine_kwargs": {"vllm": {"swap_space": 4}}}
    assert "trainer" not in new  # total_epochs: 30 is our default
    assert keys(unmapped) == ["trainer.no_such_knob", "totally_new_section.a"]


def test_a_grpo_runs_critic_and_a_disabled_reward_model_are_one_report_each():
    old = {
        **MIX,
        "critic": {"optim": {"lr": 2e-5}, "model": {"fsdp_config": {"param_offload": True}}},
        "reward_model": {"enable": False, "model": {"path": "~/rm"}, "micro_batch_size": 4},
        "custom_reward_function": {"path": "my_reward.py"},
    }
    new, unmapped = migrate(old)
    assert "critic" not in new and "reward_model" not in new and "custom_reward_function" not in new
    assert keys(unmapped) == ["custom_reward_function.path", "critic", "reward_model"]
    assert "2 settings" in dict(unmapped)["critic"] and "2 settings" in dict(unmapped)["reward_model"]


def test_a_gae_run_keeps_its_critic_under_the_new_names():
    old = {**MIX, "algorithm": {"adv_estimator": "gae"}, "critic": {"model": {"fsdp_config": {"param_offload": True}}}}
    new, unmapped = migrate(old)
    assert new["critic"] == {"fsdp": {"param_offload": True}} and new["algorithm"]["adv_estimator"] == "gae"
    assert unmapped == []


def test_an_enabled_reward_model_maps_what_verl_0_9_1_has():
    old = {
        **MIX,
        "reward_model": {"enable": True, "model": {"path": "org/rm"}, "reward_manager": "naive", "strategy": "fsdp"},
    }
    new, unmapped = migrate(old)
    assert new["reward"]["reward_model"] == {"enable": True, "model_path": "org/rm"}  # naive is our default manager
    assert keys(unmapped) == ["reward_model.strategy"]


def test_the_kl_penalty_goes_in_the_reward_when_the_kl_loss_is_off():
    new, _ = migrate({**MIX, "actor_rollout_ref": {"actor": {"use_kl_loss": False}}})
    assert new["algorithm"] == {"use_kl_in_reward": True}
    assert new["actor_rollout_ref"]["actor"]["use_kl_loss"] is False


def test_the_old_defaults_apply_where_a_file_listing_ppo_trainer_is_silent():
    listed, unmapped = migrate({"defaults": ["ppo_trainer", "_self_"], **MIX})
    assert listed["data"]["train_batch_size"] == 1024 and listed["trainer"]["n_gpus_per_node"] == 8
    assert listed["actor_rollout_ref"]["rollout"]["gpu_memory_utilization"] == 0.5
    assert listed["algorithm"]["adv_estimator"] == "gae"  # verl's old default: the old run trained a critic
    # nothing the file did not write is reported
    assert unmapped == []
    flat, _ = migrate(MIX)
    assert "data" not in flat and "trainer" not in flat


def test_hydra_keys_are_kept_but_the_search_path_and_defaults_are_ours():
    old = {
        **MIX,
        "hydra": {"searchpath": ["file://verl/verl/trainer/config", "file:///mine"], "run": {"dir": "out"}},
        "defaults": ["ppo_trainer", "my_layer", "_self_"],
    }
    new, unmapped = migrate(old)
    assert new["hydra"] == {"run": {"dir": "out"}, "searchpath": ["pkg://verl.trainer.config", "pkg://rg_verl.conf"]}
    assert new["defaults"] == ["ppo_trainer", "rg_verl_base", "grpo_3b", "_self_"]
    assert keys(unmapped) == ["defaults", "hydra.searchpath"]
