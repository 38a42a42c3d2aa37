"""A run on a Ray cluster started elsewhere (docs/multinode.md): the environment its processes do not inherit."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from omegaconf import DictConfig, OmegaConf

__all__ = ["forwarded_env", "joins_a_cluster", "shared_socket_warning"]

# the driver's settings that the run's other processes read: verl's trackers (the file logger, TensorBoard, W&B),
# Hugging Face's caches, and rg-verl's own
FORWARDED = re.compile(r"^(RG_VERL_|WANDB_|HF_|TENSORBOARD_DIR$|VERL_FILE_LOGGER_PATH$)")
# never forwarded: verl prints the runtime environment in its log. Set secrets on each node before ``ray start``.
SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSWORD", re.IGNORECASE)


def joins_a_cluster(config: DictConfig) -> bool:
    """Whether verl's ``ray.init`` joins a running cluster (``ray_kwargs.ray_init.address``, else ``RAY_ADDRESS``)."""
    address = OmegaConf.select(config, "ray_kwargs.ray_init.address") or os.environ.get("RAY_ADDRESS")
    return bool(address) and address != "local"


def forwarded_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables of ``environ`` every process of the run must see too (:data:`FORWARDED`), without secrets.

    >>> forwarded_env({"WANDB_MODE": "offline", "WANDB_API_KEY": "s3cr3t", "HF_HOME": "/data/hf", "PATH": "/bin"})
    {'WANDB_MODE': 'offline', 'HF_HOME': '/data/hf'}
    """
    environ = os.environ if environ is None else environ
    return {name: value for name, value in environ.items() if FORWARDED.match(name) and not SECRET.search(name)}


def shared_socket_warning(config: DictConfig) -> str | None:
    """A warning when this run starts its own Ray cluster for vLLM while another runs here; None otherwise.

    verl names the weight-sync socket by the job id (``vllm_rollout.py:141``): every new cluster's first is the same.
    """
    import psutil
    import ray

    if config.actor_rollout_ref.rollout.name != "vllm" or joins_a_cluster(config) or ray.is_initialized():
        return None
    raylets = sorted(p.pid for p in psutil.process_iter(["name"]) if p.info["name"] == "raylet")
    if not raylets:
        return None
    return (
        f"another Ray cluster runs on this machine (raylet pid {', '.join(map(str, raylets))}). If it runs verl with "
        "the vLLM rollout too, both runs send weights through /tmp/rl-colocate-zmq-01000000-*.sock, as verl names "
        "that socket by the Ray job id and every new cluster's first job is 01000000: one engine can get the other "
        "run's weights. Start one cluster (ray start --head) and run both in it (RAY_ADDRESS=auto), or one run at a "
        "time (docs/multinode.md, Two runs on one machine)"
    )
