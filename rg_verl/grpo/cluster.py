"""A run on a Ray cluster started elsewhere (``ray start`` on each node, docs/multinode.md).

verl joins such a cluster when ``ray_kwargs.ray_init.address`` or ``RAY_ADDRESS`` names one. Its processes were
started by the nodes' own ``ray start``, so they do not inherit the environment of the shell that runs
``train_grpo.py``: what they must see goes in the run's Ray runtime environment. ``rg_verl.grpo.launch`` puts
our plugins there, and the settings of :func:`forwarded_env`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from omegaconf import DictConfig, OmegaConf

__all__ = ["forwarded_env", "joins_a_cluster"]

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
