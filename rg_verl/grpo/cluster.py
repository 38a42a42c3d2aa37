"""A run on a Ray cluster started elsewhere (``ray start`` on each node, docs/multinode.md).

verl joins such a cluster when ``ray_kwargs.ray_init.address`` or ``RAY_ADDRESS`` names one. Its processes were
started by the nodes' own ``ray start``, so they do not inherit the environment of the shell that runs
``train_grpo.py``: what they must see goes in the run's Ray runtime environment. ``rg_verl.grpo.launch`` puts
our plugins there, and the settings of :func:`forwarded_env`.

A run that starts a cluster of its own while another Ray cluster runs on the machine gets a warning when it uses
verl's vLLM rollout (:func:`shared_socket_warning`).
"""

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
    """Whether verl's ``ray.init`` joins a running Ray cluster (``ray_kwargs.ray_init.address``, else
    ``RAY_ADDRESS``, as ``ray job submit`` sets it) rather than starting one in this process."""
    address = OmegaConf.select(config, "ray_kwargs.ray_init.address") or os.environ.get("RAY_ADDRESS")
    return bool(address) and address != "local"


def forwarded_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables of ``environ`` (this process's by default) that every process of the run must see too:
    :data:`FORWARDED`, without secrets.

    >>> forwarded_env({"WANDB_MODE": "offline", "WANDB_API_KEY": "s3cr3t", "HF_HOME": "/data/hf", "PATH": "/bin"})
    {'WANDB_MODE': 'offline', 'HF_HOME': '/data/hf'}
    """
    environ = os.environ if environ is None else environ
    return {name: value for name, value in environ.items() if FORWARDED.match(name) and not SECRET.search(name)}


def shared_socket_warning(config: DictConfig) -> str | None:
    """A warning when this run will start a Ray cluster of its own for verl's vLLM rollout while another Ray cluster
    runs on this machine (a ``raylet`` process); None otherwise.

    verl names the socket that carries the weights to vLLM by the Ray job id
    (``/tmp/rl-colocate-zmq-<job id>-replica-<r>-rank-<k>.sock``, ``verl/workers/rollout/vllm_rollout/
    vllm_rollout.py:141``), and the first job of every new cluster is ``01000000``: two such runs' weight syncs
    meet on one socket. Runs that join one cluster are different jobs of it (docs/multinode.md).
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
