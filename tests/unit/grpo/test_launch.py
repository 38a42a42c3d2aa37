"""Composing our configs with Hydra, verl's own validation, and which plugins a config loads."""

import subprocess
import sys

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from rg_verl.cpu.settings import CPU_SETTINGS
from rg_verl.grpo.launch import apply_device_settings, plugin_modules, process_env
from tests.helpers import REPO


def compose_config(config_dir: str, name: str, overrides: list[str] = ()) -> OmegaConf:
    with initialize_config_dir(config_dir=str(REPO / config_dir), version_base=None):
        return compose(config_name=name, overrides=list(overrides))


def test_smoke_config_passes_verl_validation_without_ray():
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    config = compose_config("configs/smoke", "cpu")
    apply_device_settings(config)
    validate_config(config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    assert config.data.custom_cls.path == "pkg://rg_verl.data.dataset"
    assert config.reward.custom_reward_function.path == "pkg://rg_verl.reward"
    assert config.trainer.v1.trainer_mode == "rg_verl"
    assert config.algorithm.adv_estimator == "grpo"
    # our section reaches the dataset through verl's data config
    assert OmegaConf.to_container(config.data.reasoning_gym, resolve=True) == OmegaConf.to_container(
        config.reasoning_gym, resolve=True
    )


def test_cpu_config_loads_cpu_platform_and_hf_rollout():
    config = compose_config("configs/smoke", "cpu")
    assert plugin_modules(config) == ["rg_verl.cpu.platform", "rg_verl.hf_rollout", "rg_verl.grpo.trainer"]
    env = process_env(config)
    assert env["VERL_PLATFORM"] == "cpu"
    assert env["PYTHONHASHSEED"].isdigit()  # reasoning-gym items must not depend on the hash seed
    assert env["VERL_USE_EXTERNAL_MODULES"].split(",")[-3:] == ["rg_verl.cpu.platform", "rg_verl.hf_rollout", "rg_verl.grpo.trainer"]


def test_cuda_config_loads_no_cpu_plugin():
    config = compose_config(
        "configs/smoke", "cpu", ["trainer.device=cuda", "actor_rollout_ref.rollout.name=vllm", "trainer.n_gpus_per_node=4"]
    )
    before = OmegaConf.to_container(config)
    apply_device_settings(config)
    assert OmegaConf.to_container(config) == before, "a cuda config must not be changed"
    assert plugin_modules(config) == ["rg_verl.grpo.trainer"]
    env = process_env(config)
    assert "VERL_PLATFORM" not in env and "VERL_ENGINE_DEVICE" not in env
    assert "rg_verl.cpu.platform" not in env.get("VERL_USE_EXTERNAL_MODULES", "")


def test_hf_rollout_loads_on_cuda_without_cpu_platform():
    config = compose_config("configs/smoke", "cpu", ["trainer.device=cuda", "actor_rollout_ref.rollout.name=hf"])
    assert plugin_modules(config) == ["rg_verl.hf_rollout", "rg_verl.grpo.trainer"]
    assert "VERL_PLATFORM" not in process_env(config)


def test_cpu_settings_override_gpu_only_choices():
    config = compose_config(
        "configs/smoke",
        "cpu",
        ["actor_rollout_ref.actor.strategy=fsdp", "actor_rollout_ref.rollout.name=vllm", "trainer.n_gpus_per_node=2"],
    )
    apply_device_settings(config)
    for key, value in CPU_SETTINGS.items():
        assert OmegaConf.select(config, key) == value
    assert config.ray_kwargs.ray_init.num_gpus == 2  # one logical GPU per worker
    assert config.ray_kwargs.ray_init.num_cpus >= 16


def test_train_grpo_without_arguments_composes_the_smoke_config(tmp_path):
    """`python train_grpo.py` from any directory composes the CPU smoke config (shown, not run)."""
    proc = subprocess.run(
        [sys.executable, str(REPO / "train_grpo.py"), "--cfg", "job", "trainer.total_training_steps=1"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    config = OmegaConf.create(proc.stdout)
    assert config.trainer.device == "cpu"
    assert config.trainer.total_training_steps == 1
    assert "chain_sum" in config.reasoning_gym.datasets


def run_entry_point(tmp_path, *args):
    return subprocess.run(
        [sys.executable, str(REPO / "train_grpo.py"), *args], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )


def test_dry_run_prints_config_and_samples_without_ray(tmp_path):
    proc = run_entry_point(tmp_path, "+dry_run=true", f"actor_rollout_ref.model.path={tmp_path}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "reasoning_gym:" in proc.stdout
    assert "--- train[0] reasoning_gym/" in proc.stdout and "--- val[0] reasoning_gym/" in proc.stdout
    assert "[answer]" in proc.stdout
    assert "ray init" not in proc.stdout + proc.stderr


def test_bad_config_stops_before_ray_with_a_clear_message(tmp_path):
    proc = run_entry_point(tmp_path, "reasoning_gym.datasets.chain_sum.weight=-2")
    assert proc.returncode != 0
    assert "Invalid config: reasoning_gym.datasets.chain_sum.weight: -2 is below 0" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert "ray init" not in proc.stdout + proc.stderr
