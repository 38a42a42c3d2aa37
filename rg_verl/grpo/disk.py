"""The run's folder, checked before Ray starts: it can be written and has room for one checkpoint (per parameter)."""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from rg_verl.common.schema import ConfigError

__all__ = ["BYTES_PER_PARAMETER", "check_output_dir", "checkpoint_bytes", "count_parameters", "nearest_folder"]

logger = logging.getLogger(__name__)

# actor.checkpoint.save_contents entry -> bytes it stores per model parameter
BYTES_PER_PARAMETER = {"model": 4, "optimizer": 8, "hf_model": 2}
FIELD = "trainer.default_local_dir"


def nearest_folder(path: Path) -> Path:
    """``path`` itself if it exists, else its nearest ancestor that does (what creating it would write into)."""
    path = Path(os.path.abspath(path))
    while not path.exists() and path.parent != path:
        path = path.parent
    return path


def count_parameters(model_path: str) -> int | None:
    """Parameters of the model at ``model_path`` from its local safetensors headers; None when there are none."""
    from safetensors import safe_open

    folder = Path(model_path).expanduser()
    if not folder.is_dir():
        from huggingface_hub import snapshot_download

        try:  # the local cache only: nothing is downloaded
            folder = Path(snapshot_download(model_path, local_files_only=True, allow_patterns=["*.safetensors*"]))
        except Exception:  # noqa: BLE001 - not cached (or not a hub id): unknown, and the caller says so
            return None
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None
    total = 0
    for file in files:
        with safe_open(str(file), "pt") as weights:
            total += sum(math.prod(weights.get_slice(name).get_shape()) for name in weights.keys())
    return total


def checkpoint_bytes(config: DictConfig, parameters: int) -> int:
    """Bytes one checkpoint of the run takes for a model of ``parameters`` (see the module docstring)."""
    actor = config.actor_rollout_ref
    contents = OmegaConf.select(actor, "actor.checkpoint.save_contents", default=None) or ["model", "optimizer"]
    lora = (OmegaConf.select(actor, "model.lora_rank", default=0) or 0) > 0
    per_parameter = sum(BYTES_PER_PARAMETER.get(item, 0) for item in contents if not (lora and item == "optimizer"))
    critic = OmegaConf.select(config, "critic.enable", default=None) or config.algorithm.adv_estimator == "gae"
    return parameters * per_parameter * (2 if critic else 1)


def _check_writable(folder: Path, target: Path) -> None:
    if not folder.is_dir():
        raise ConfigError(
            f"{FIELD}: {target} cannot be created: {folder} is a file, not a folder; point {FIELD} at a folder"
        )
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigError(f"{FIELD}: {target} cannot be written: {folder} is not writable; point {FIELD} elsewhere")


def check_output_dir(config: DictConfig) -> None:
    """``trainer.default_local_dir`` can be written and has room for a checkpoint; else a :class:`ConfigError`."""
    target = Path(os.path.abspath(os.path.expanduser(str(config.trainer.default_local_dir))))
    folder = nearest_folder(target)
    _check_writable(folder, target)
    if (config.trainer.get("save_freq", -1) or -1) <= 0:
        return
    model = str(config.actor_rollout_ref.model.path)
    parameters = count_parameters(model)
    if parameters is None:
        logger.info("%s: the weights of %s are not on this machine yet; free space not checked", FIELD, model)
        return
    need, free = checkpoint_bytes(config, parameters), shutil.disk_usage(folder).free
    if need > free:
        raise ConfigError(
            f"{FIELD}: {target} has {free / 1e9:.1f} GB free, and one checkpoint of this run needs about "
            f"{need / 1e9:.1f} GB ({parameters / 1e9:.2f}B parameters; saved: "
            f"{json.dumps(list(config.actor_rollout_ref.actor.checkpoint.save_contents))}); free space, point "
            f"{FIELD} at a larger disk, or set trainer.save_freq=-1 to save none"
        )
