"""Composing our configs with Hydra, verl's own validation, which plugins a config loads, and the tiny model."""

import contextlib
import dataclasses
import os
import re
import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf, open_dict

from rg_verl.common.schema import ConfigError
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
    assert env["VERL_USE_EXTERNAL_MODULES"].split(",")[-3:] == plugin_modules(config)


def test_retry_episodes_load_their_agent_loop_in_every_process():
    retry = "actor_rollout_ref.rollout.agent.default_agent_loop=rg_verl_retry"
    config = compose_config("configs/smoke", "cpu", [retry])
    assert plugin_modules(config)[-1] == "rg_verl.retry.agent_loop"
    assert "rg_verl.retry.agent_loop" not in plugin_modules(compose_config("configs/smoke", "cpu"))


def test_inherited_plugin_modules_are_kept(monkeypatch):
    config = compose_config("configs/smoke", "cpu")
    monkeypatch.setenv("VERL_USE_EXTERNAL_MODULES", "my_plugin, rg_verl.hf_rollout")
    assert process_env(config)["VERL_USE_EXTERNAL_MODULES"].split(",") == ["my_plugin", *plugin_modules(config)]


def test_cuda_config_loads_no_cpu_plugin():
    overrides = ["trainer.device=cuda", "actor_rollout_ref.rollout.name=vllm", "trainer.n_gpus_per_node=4"]
    config = compose_config("configs/smoke", "cpu", overrides)
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
        "configs/smoke", "cpu", ["actor_rollout_ref.actor.strategy=fsdp", "trainer.n_gpus_per_node=2"]
    )
    apply_device_settings(config)
    for key, value in CPU_SETTINGS.items():
        assert OmegaConf.select(config, key) == value
    assert config.actor_rollout_ref.rollout.name == "hf"  # the config's rollout is kept
    assert config.actor_rollout_ref.rollout.free_cache_engine  # vLLM's CPU settings only for a vllm rollout
    assert config.ray_kwargs.ray_init.num_gpus == 2  # one logical GPU per worker
    assert config.ray_kwargs.ray_init.num_cpus >= 16


def test_a_vllm_rollout_on_the_cpu_gets_vllms_cpu_settings_or_a_clear_error(monkeypatch):
    from rg_verl.cpu import settings
    from rg_verl.cpu.settings import VLLM_ROLLOUT_SETTINGS as ROLLOUT_SETTINGS

    overrides = ["actor_rollout_ref.rollout.name=vllm"]
    monkeypatch.setattr(settings, "vllm_installed", lambda: False)
    with pytest.raises(ConfigError, match="rollout.name: vllm on trainer.device=cpu needs vLLM's CPU build.*=hf"):
        apply_device_settings(compose_config("configs/smoke", "cpu", overrides))
    with pytest.raises(ConfigError, match="'sglang' does not run on trainer.device=cpu"):
        settings.check_rollout(compose_config("configs/smoke", "cpu", ["actor_rollout_ref.rollout.name=sglang"]))
    monkeypatch.setattr(settings, "vllm_installed", lambda: True)
    config = compose_config("configs/smoke", "cpu", overrides)
    apply_device_settings(config)
    assert config.actor_rollout_ref.rollout.name == "vllm"
    for key, value in ROLLOUT_SETTINGS.items():
        assert OmegaConf.select(config, key) == value
    gpu = compose_config("configs/smoke", "cpu", [*overrides, "trainer.device=cuda"])
    apply_device_settings(gpu)  # a GPU run gets none of them
    rollout = gpu.actor_rollout_ref.rollout
    assert rollout.gpu_memory_utilization == 0.5 and rollout.free_cache_engine
    assert "VLLM_TARGET_DEVICE" not in process_env(gpu) and process_env(config)["VLLM_TARGET_DEVICE"] == "cpu"


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


def test_a_small_space_is_a_warning_before_ray_and_a_dry_run_counts_its_repeats(tmp_path):
    # chain_sum with 2 one-digit terms has about 200 questions: 1000 training items must repeat
    small = "reasoning_gym.datasets={chain_sum: {config: {min_terms: 2, max_terms: 2, max_digits: 1}}}"
    proc = run_entry_point(
        tmp_path, "+dry_run=true", "~reasoning_gym.datasets.leg_counting", small, "reasoning_gym.train_size=1000",
        f"actor_rollout_ref.model.path={tmp_path}",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    logs = proc.stdout + proc.stderr
    assert "reasoning_gym.datasets.chain_sum: the train split asks for about 1,000 items of 'chain_sum'" in logs
    assert "sampled questions" in logs and "raise max_terms, max_digits in its config" in logs
    counts = re.search(r"chain_sum: 1000 items, (\d+) distinct questions, (\d+) repeats", proc.stdout)
    assert counts, proc.stdout[-2000:]
    distinct, repeats = map(int, counts.groups())
    assert distinct + repeats == 1000 and 100 < distinct < 200  # the training share holds about 180 of 200
    assert "ray init" not in logs


@pytest.mark.parametrize(
    "override, message",
    [
        ("reasoning_gym.datasets.chain_sum.weight=-2", "reasoning_gym.datasets.chain_sum.weight: -2 is below 0"),
        ("trainer.use_v1=false", "trainer.use_v1: False; rg-verl runs on verl's V1 trainer"),
        ("data.custom_cls.path=pkg://rg_verl.dataset", "data.custom_cls.path: 'pkg://rg_verl.dataset' names no module"),
    ],
)
def test_bad_config_stops_before_ray_with_a_clear_message(tmp_path, override, message):
    # the model path does not exist, and is not built: the checks come first
    proc = run_entry_point(tmp_path, override, f"actor_rollout_ref.model.path={tmp_path / 'model'}")
    assert proc.returncode != 0
    assert f"Invalid config: {message}" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert "ray init" not in proc.stdout + proc.stderr
    assert not (tmp_path / "model").exists()


def test_a_missing_data_file_stops_a_dry_run_before_any_item(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(REPO / "train_grpo.py"), "--config-path", "configs/math", "--config-name",
         "gsm8k_qwen_7b", "+dry_run=true"],
        cwd=tmp_path, env={**os.environ, "RG_VERL_DATA": str(tmp_path / "empty")},
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode != 0
    assert "Invalid config: reasoning_gym.datasets.gsm8k.source.train: " in proc.stderr
    assert "does not exist; download GSM8K and MATH" in proc.stderr and "Traceback" not in proc.stderr
    assert "--- train[0]" not in proc.stdout


def test_run_visits_each_room_once_in_order(monkeypatch, tmp_path):
    """The checks before Ray (validation, the data files, the device, verl's checks), then the launch; a dry run
    makes every check and launches nothing."""
    import verl.trainer.main_ppo
    import verl.utils.config

    from rg_verl.grpo import launch

    calls = []
    settings = object()

    def record(name, result=None):
        def step(*args, **kwargs):
            calls.append((name, args[0] if args else None))
            return result

        return step

    monkeypatch.setattr(launch, "validate", record("validate", settings))
    monkeypatch.setattr(launch, "check_sources", record("check_sources"))
    monkeypatch.setattr(launch, "space_warnings", record("space_warnings", ["a small space"]))
    monkeypatch.setattr(launch, "apply_device_settings", record("apply_device_settings"))
    monkeypatch.setattr(launch, "prepare", record("prepare"))
    monkeypatch.setattr(launch, "dry_run", record("dry_run"))
    monkeypatch.setattr(verl.utils.config, "validate_config", record("validate_config"))
    monkeypatch.setattr(verl.trainer.main_ppo, "run_ppo", record("run_ppo"))
    config = compose_config("configs/smoke", "cpu", [f"trainer.default_local_dir={tmp_path}"])
    launch.run(config)
    checks = ["validate", "check_sources", "space_warnings", "apply_device_settings", "validate_config"]
    assert [name for name, _ in calls] == [*checks, "prepare", "run_ppo"]
    assert calls[1][1] is settings and calls[2][1] is settings  # the data room gets what validation parsed
    calls.clear()
    launch.run(compose_config("configs/smoke", "cpu", [f"trainer.default_local_dir={tmp_path}", "+dry_run=true"]))
    assert [name for name, _ in calls] == [*checks, "dry_run"]


# configs that a dry run passed while the checks of the CPU settings and verl's validate_config ran after it
REFUSED_AFTER_A_DRY_RUN = {
    "a rollout the CPU cannot run": (
        ["actor_rollout_ref.rollout.name=sglang"],
        "actor_rollout_ref.rollout.name: 'sglang' does not run on trainer.device=cpu; set "
        "actor_rollout_ref.rollout.name=hf (or vllm, with vLLM's CPU build installed)",
    ),
    "sampled validation at temperature 0": (
        ["actor_rollout_ref.rollout.val_kwargs.do_sample=true", "actor_rollout_ref.rollout.temperature=0"],
        "verl's validate_config refuses the config: validation gen temperature should be greater than 0 when "
        "enabling do_sample",
    ),
    "no rollout named": (
        ["actor_rollout_ref.rollout.name='???'"],
        "actor_rollout_ref.rollout.name: no value (verl's default is ???); set actor_rollout_ref.rollout.name=...",
    ),
    "two micro-batch sizes": (
        ["actor_rollout_ref.rollout.log_prob_micro_batch_size=2"],
        "verl's validate_config refuses the config: [actor_rollout_ref.rollout] You have set both "
        "'actor_rollout_ref.rollout.log_prob_micro_batch_size' AND",
    ),
}


@pytest.mark.parametrize("case", list(REFUSED_AFTER_A_DRY_RUN))
def test_a_dry_run_refuses_what_the_run_would_refuse_with_the_same_message(case, monkeypatch, tmp_path):
    import verl.trainer.main_ppo

    from rg_verl.grpo import launch

    overrides, message = REFUSED_AFTER_A_DRY_RUN[case]
    overrides = [*overrides, f"actor_rollout_ref.model.path={tmp_path / 'model'}"]
    monkeypatch.setattr(launch, "prepare", lambda config: pytest.fail("prepared a refused config"))
    monkeypatch.setattr(verl.trainer.main_ppo, "run_ppo", lambda *args, **kwargs: pytest.fail("ran a refused config"))
    errors = []
    for dry in ([], ["+dry_run=true"]):
        with pytest.raises(ConfigError) as refused:
            launch.run(compose_config("configs/smoke", "cpu", [*overrides, *dry]))
        errors.append(str(refused.value))
    assert errors[0] == errors[1] and errors[0].startswith(message)
    proc = run_entry_point(tmp_path, *overrides, "+dry_run=true")
    assert proc.returncode == 1 and f"Invalid config: {message}" in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "--- train[0]" not in proc.stdout


def test_a_run_that_resumes_says_so_in_one_line_and_a_fresh_one_says_nothing(monkeypatch, tmp_path, capsys):
    import verl.trainer.main_ppo

    from rg_verl.grpo import launch
    from tests.unit.grpo.test_resume import save

    monkeypatch.setattr(launch, "prepare", lambda config: None)
    monkeypatch.setattr(launch, "quiet_console", lambda config: contextlib.nullcontext())
    monkeypatch.setattr(verl.trainer.main_ppo, "run_ppo", lambda *args, **kwargs: None)
    config = compose_config("configs/smoke", "cpu", [f"trainer.default_local_dir={tmp_path}"])
    launch.run(config)
    assert "[rg-verl]" not in capsys.readouterr().out
    save(tmp_path, 2)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("2")
    launch.run(config)
    assert [line for line in capsys.readouterr().out.splitlines() if "[rg-verl]" in line] == [
        f"[rg-verl] resuming from the checkpoint of step 2 in {tmp_path} (trainer.resume_mode=disable starts afresh)"
    ]
    save(tmp_path, 3)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("3")  # the smoke config's last step
    launch.run(config)
    assert [line for line in capsys.readouterr().out.splitlines() if "[rg-verl]" in line] == [
        f"[rg-verl] resuming from the checkpoint of step 3 in {tmp_path}: its 3 steps are trained, nothing is left "
        "(raise trainer.total_training_steps to go on)"
    ]


def test_an_unknown_tiny_model_option_is_refused_before_building(tmp_path):
    from rg_verl.common.schema import ConfigError
    from rg_verl.grpo.launch import ensure_model

    config = compose_config("configs/smoke", "cpu", [f"actor_rollout_ref.model.path={tmp_path / 'model'}"])
    with open_dict(config):
        config.tiny_model.hiden_size = 8
    valid = "seed, hidden_size, num_layers, num_heads, num_kv_heads, intermediate_size, vocab_size, "
    valid += "max_position_embeddings, thinking_template, build_if_missing, warm_start"
    with pytest.raises(ConfigError) as error:
        ensure_model(config)
    assert str(error.value) == f"tiny_model.hiden_size: unknown key (did you mean 'hidden_size'?); valid keys: {valid}"
    assert not (tmp_path / "model").exists()


def test_a_dry_run_refuses_a_bad_tiny_model_key_naming_the_field(tmp_path):
    proc = run_entry_point(
        tmp_path, "+dry_run=true", "+tiny_model.hidden_sise=8", f"actor_rollout_ref.model.path={tmp_path / 'model'}"
    )
    assert proc.returncode != 0
    assert "Invalid config: tiny_model.hidden_sise: unknown key (did you mean 'hidden_size'?)" in proc.stderr
    assert "--- train[0]" not in proc.stdout and not (tmp_path / "model").exists()


def test_ensure_model_passes_the_warm_start_and_the_runs_datasets(tmp_path, monkeypatch):
    from rg_verl.cpu.tiny_model import TinyModelOptions
    from rg_verl.cpu.warm_start import WARM_START_DEFAULTS
    from rg_verl.grpo import launch

    calls = []
    monkeypatch.setattr(launch, "ensure_tiny_model", lambda path, **kwargs: calls.append((path, kwargs)))
    config = compose_config("configs/smoke", "learn", [f"actor_rollout_ref.model.path={tmp_path / 'm'}"])
    smoke = compose_config("configs/smoke", "cpu", [f"actor_rollout_ref.model.path={tmp_path / 's'}"])
    launch.ensure_model(config)
    launch.ensure_model(smoke)
    (path, kwargs), (smoke_path, smoke_kwargs) = calls
    plain = dataclasses.asdict(TinyModelOptions())  # every size at its declared default
    assert smoke_kwargs == {**plain, "warm_start": None} and smoke_path == str(tmp_path / "s")  # smoke: plain
    warm = kwargs.pop("warm_start")
    assert kwargs == plain and path == str(tmp_path / "m")
    assert warm["steps"] == 150 and warm["format_rate"] == 0.3 and warm["seed"] == 0
    assert warm["datasets"] == {"chain_sum": dict(config.reasoning_gym.datasets.chain_sum.config)}
    assert warm["system_prompt"] == "default"
    assert {key: warm[key] for key in ("batch_size", "lr", "num_prompts")} == {
        key: WARM_START_DEFAULTS[key] for key in ("batch_size", "lr", "num_prompts")
    }
    # a relative path is left to verl: nothing is built
    launch.ensure_model(compose_config("configs/smoke", "learn", ["actor_rollout_ref.model.path=relative/m"]))
    assert len(calls) == 2
    # the learn config's model lives apart from the smoke config's plain one
    monkeypatch.delenv("RG_VERL_TINY_MODEL", raising=False)
    monkeypatch.delenv("RG_VERL_LEARN_MODEL", raising=False)
    default_learn = compose_config("configs/smoke", "learn").actor_rollout_ref.model.path
    default_smoke = compose_config("configs/smoke", "cpu").actor_rollout_ref.model.path
    assert default_learn != default_smoke


def test_ensure_model_rejects_unknown_tiny_model_options(tmp_path, monkeypatch):
    from rg_verl.common.schema import ConfigError
    from rg_verl.grpo import launch

    monkeypatch.setattr(launch, "ensure_tiny_model", lambda path, **kwargs: pytest.fail("built a model"))
    path = f"actor_rollout_ref.model.path={tmp_path / 'm'}"
    bad_key = compose_config("configs/smoke", "learn", [path, "+tiny_model.hidden=8"])
    bad_option = compose_config("configs/smoke", "learn", [path, "+tiny_model.warm_start.stpes=8"])
    with pytest.raises(ConfigError, match=r"^tiny_model\.hidden: unknown key \(did you mean 'hidden_size'\?\)"):
        launch.ensure_model(bad_key)
    with pytest.raises(ConfigError, match=r"^tiny_model\.warm_start\.stpes: unknown key \(did you mean 'steps'\?\)"):
        launch.ensure_model(bad_option)
    assert not (tmp_path / "m").exists()


def test_the_plugin_environment_reaches_a_cluster_started_elsewhere(monkeypatch, tmp_path):
    """A cluster started with ``ray start`` does not inherit this process's environment: verl passes the runtime
    env of ``ray_kwargs.ray_init`` to it, so the plugins must be named there."""
    from rg_verl.grpo import launch

    config = compose_config("configs/smoke", "cpu", [f"actor_rollout_ref.model.path={tmp_path / 'model'}"])
    monkeypatch.setattr(launch, "ensure_model", lambda config: None)
    monkeypatch.setattr(os, "environ", dict(os.environ))  # prepare exports the environment here too
    from verl.plugin.platform import get_platform, set_platform

    platform = get_platform()
    try:
        launch.prepare(config)
    finally:
        set_platform(platform)  # prepare sets the CPU platform, as a run does
    env_vars = config.ray_kwargs.ray_init.runtime_env.env_vars
    assert env_vars["VERL_USE_EXTERNAL_MODULES"].split(",")[-3:] == plugin_modules(config)
    assert env_vars["VERL_PLATFORM"] == "cpu"
    assert env_vars["PYTHONHASHSEED"] == os.environ["PYTHONHASHSEED"]


@pytest.mark.parametrize(
    ("override", "env", "joins"),
    [([], None, False), ([], "127.0.0.1:6379", True), (["+ray_kwargs.ray_init.address=auto"], None, True)],
)
def test_a_cpu_run_that_joins_a_cluster_takes_the_nodes_resources(monkeypatch, override, env, joins):
    """Ray refuses num_gpus and num_cpus when it joins a running cluster: there each node's ``ray start`` gives them."""
    if env is None:
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
    else:
        monkeypatch.setenv("RAY_ADDRESS", env)
    config = compose_config("configs/smoke", "cpu", ["trainer.nnodes=2", *override])
    apply_device_settings(config)
    ray_init = config.ray_kwargs.ray_init
    assert ray_init.get("num_gpus") == (None if joins else 2)
    assert (ray_init.get("num_cpus") is None) == joins
