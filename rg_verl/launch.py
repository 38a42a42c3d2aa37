"""Start a verl GRPO run from a composed config, with rg-verl's plugins loaded where needed.

verl imports the modules named in ``VERL_USE_EXTERNAL_MODULES`` when ``verl`` is imported, in
the driver and in every Ray worker. This module decides which of ours a config needs:

- ``trainer.device=cpu`` loads ``rg_verl.cpu`` (the CPU platform) and applies the settings a
  CPU run needs (:data:`CPU_SETTINGS`);
- ``actor_rollout_ref.rollout.name=hf`` loads ``rg_verl.hf_rollout``.

A GPU run with vLLM loads neither.
"""

import logging
import os
import sys

from omegaconf import DictConfig, OmegaConf, open_dict

from rg_verl.config import ConfigError, validate
from rg_verl.math_data import SPLITS

logger = logging.getLogger(__name__)

# What a CPU run must set, whatever the experiment config says, and why.
CPU_SETTINGS = {
    # FSDP1 cannot sync module states held on CPU; FSDP2 can.
    "actor_rollout_ref.actor.strategy": "fsdp2",
    "actor_rollout_ref.ref.strategy": "fsdp2",
    # flash-attention is CUDA-only.
    "actor_rollout_ref.model.override_config.attn_implementation": "sdpa",
    "actor_rollout_ref.actor.use_torch_compile": False,
    "actor_rollout_ref.ref.use_torch_compile": False,
    # vLLM, SGLang and TensorRT-LLM need a GPU.
    "actor_rollout_ref.rollout.name": "hf",
    # verl's TransferQueue starts about nine one-CPU actors; keep its storage to one unit.
    "transfer_queue.backend.SimpleStorage.num_data_storage_units": 1,
}

# Ray's logical CPU count on a CPU run: verl's helper actors each reserve one CPU, and a
# 2-core laptop would otherwise leave them waiting for ever.
CPU_RAY_LOGICAL_CPUS = 16


def plugin_modules(config: DictConfig) -> list[str]:
    """The rg-verl modules every process of this run must import."""
    modules = []  # the platform first: the others resolve verl's platform when imported
    if config.trainer.device == "cpu":
        modules.append("rg_verl.cpu")
    if config.actor_rollout_ref.rollout.name == "hf":
        modules.append("rg_verl.hf_rollout")
    if config.trainer.v1.trainer_mode == "rg_verl":
        modules.append("rg_verl.trainer")
    return modules


def process_env(config: DictConfig) -> dict[str, str]:
    """Environment variables every process of the run gets: our plugins, and a fixed hash seed.

    A few reasoning-gym generators iterate over sets, whose order follows ``PYTHONHASHSEED``;
    fixing it (unless the user already did) keeps items a pure function of (seed, index).
    """
    env = {"PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED", "0")}
    modules = plugin_modules(config)
    if modules:
        inherited = [m for m in os.environ.get("VERL_USE_EXTERNAL_MODULES", "").split(",") if m]
        env["VERL_USE_EXTERNAL_MODULES"] = ",".join(dict.fromkeys(inherited + modules))
    if config.trainer.device == "cpu":
        env["VERL_PLATFORM"] = "cpu"
        # verl registers its FSDP engine for cuda/npu; the engine itself is device-agnostic.
        env["VERL_ENGINE_DEVICE"] = "cuda"
    return env


def apply_device_settings(config: DictConfig) -> None:
    """Adjust ``config`` in place for the device it names (only ``cpu`` needs anything)."""
    if config.trainer.device != "cpu":
        return
    with open_dict(config):
        for key, value in CPU_SETTINGS.items():
            if OmegaConf.select(config, key) != value:
                logger.info("trainer.device=cpu: setting %s=%s", key, value)
                OmegaConf.update(config, key, value, force_add=True)
        ray_init = config.ray_kwargs.ray_init
        ray_init.num_gpus = config.trainer.n_gpus_per_node * config.trainer.nnodes
        ray_init.num_cpus = max(ray_init.get("num_cpus") or 0, CPU_RAY_LOGICAL_CPUS)


def ensure_model(config: DictConfig) -> None:
    """Build the tiny local model when the config asks for it and it is not there yet.

    Only an absolute path is built; anything else (a hub id, a relative path) is left to verl.
    The other keys of ``tiny_model`` go to :func:`rg_verl.tiny.ensure_tiny_model` (``seed``,
    ``hidden_size``, ..., ``warm_start``). A warm start without ``datasets`` or ``system_prompt``
    draws its prompts like the run does: from ``reasoning_gym.datasets`` and
    ``reasoning_gym.system_prompt``.
    """
    path = config.actor_rollout_ref.model.path
    if not OmegaConf.select(config, "tiny_model.build_if_missing", default=False) or not os.path.isabs(path):
        return
    import inspect

    from rg_verl.tiny import build_tiny_model, ensure_tiny_model, warm_start_options

    options = OmegaConf.to_container(config.tiny_model, resolve=True)
    options.pop("build_if_missing")
    valid = [n for n, p in inspect.signature(build_tiny_model).parameters.items() if p.kind is p.KEYWORD_ONLY]
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ConfigError(f"tiny_model.{unknown[0]}: unknown key; valid keys: build_if_missing, {', '.join(valid)}")
    warm_start = options.get("warm_start")
    if warm_start is not None:
        rg = OmegaConf.to_container(config.reasoning_gym, resolve=True) if "reasoning_gym" in config else {}
        if "datasets" not in warm_start and rg.get("datasets"):
            warm_start["datasets"] = {  # the generated datasets; file datasets have no generator
                name: (spec or {}).get("config") or {}
                for name, spec in rg["datasets"].items()
                if not (spec or {}).get("source")
            }
        if "system_prompt" not in warm_start and rg.get("system_prompt"):
            warm_start["system_prompt"] = rg["system_prompt"]
        try:
            warm_start_options(warm_start)
        except ValueError as error:
            raise ConfigError(f"tiny_model.{error}") from None
    ensure_tiny_model(path, **options)


def absolute_source_paths(config: DictConfig) -> None:
    """Make the local files of file datasets absolute, so that every Ray process finds them.

    Relative paths are relative to the directory the run was started from.
    """
    for mix in ("datasets", "val_datasets"):
        for spec in (OmegaConf.select(config, f"reasoning_gym.{mix}") or {}).values():
            source = (spec or {}).get("source") or {}
            for split in SPLITS:
                if isinstance(source.get(split), str):
                    source[split] = os.path.abspath(os.path.expanduser(source[split]))


def prepare(config: DictConfig) -> None:
    """Apply device settings, export the plugin environment and load the plugins here too."""
    apply_device_settings(config)
    absolute_source_paths(config)
    ensure_model(config)
    env = process_env(config)
    os.environ.update(env)
    with open_dict(config):
        env_vars = config.ray_kwargs.ray_init.runtime_env.setdefault("env_vars", {})
        env_vars.update(env)
    import importlib

    for module in plugin_modules(config):
        importlib.import_module(module)
    if config.trainer.device == "cpu":
        from verl.plugin.platform import get_platform, set_platform

        from rg_verl.cpu import PlatformCPU

        if get_platform().device_name != "cpu":
            set_platform(PlatformCPU())


def dry_run(config: DictConfig, samples: int = 3) -> None:
    """Print the resolved config and a few items of each split, without Ray or a model."""
    from rg_verl.dataset import ReasoningGymDataset

    print(OmegaConf.to_yaml(config, resolve=True))
    for split in ("train", "val"):
        dataset = ReasoningGymDataset(f"reasoning_gym://{split}", None, config.data)
        for index in range(min(samples, len(dataset))):
            item = dataset[index]
            print(f"--- {split}[{index}] {item['data_source']}")
            for message in item["raw_prompt"]:
                print(f"[{message['role']}] {message['content']}")
            print(f"[answer] {item['reward_model']['ground_truth']}")


def run(config: DictConfig) -> None:
    """Check our sections, then verl's (as its ``main_ppo`` does), then train.

    ``+dry_run=true`` stops after the checks and prints the config and sample items instead.
    """
    validate(config)
    if config.get("dry_run", False):
        dry_run(config)
        return
    prepare(config)
    from verl.trainer.main_ppo import TaskRunnerV1, run_ppo
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    if not config.trainer.use_v1:
        raise ValueError("rg-verl runs on verl's V1 trainer; remove trainer.use_v1=False")
    run_ppo(config, task_runner_class=TaskRunnerV1)


def main_task(config: DictConfig) -> None:
    """The Hydra task of ``train_grpo.py`` and ``rg-verl train``: :func:`run`, a bad config exiting with one line."""
    try:
        run(config)
    except ConfigError as error:
        sys.exit(f"Invalid config: {error}")
