"""OREO checkpoints: ``global_step_N/{actor,critic}`` in verl's FSDP layout and ``trainer_state.json``, tracker last."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from rg_verl.common.atomic import write_atomic
from rg_verl.oreo.value_init import token_classification_architecture

__all__ = ["STATE_FILE", "ResumeError", "checkpoint_config", "load", "save", "trajectories_key"]

STATE_FILE = "trainer_state.json"


class ResumeError(RuntimeError):
    """A checkpoint that cannot be resumed from; the message names the file and what to do."""


def checkpoint_config(config: DictConfig) -> Any:
    """verl's ``CheckpointConfig`` of the run (what the engines save and load)."""
    from verl.utils.config import omega_conf_to_dataclass

    return omega_conf_to_dataclass(config.checkpoint)


def trajectories_key(trajectories: Sequence[Any]) -> str:
    """A digest of the trajectories' ids, in order: stored reference log-probs belong to exactly these."""
    digest = hashlib.sha256()
    for t in trajectories:
        digest.update(f"{t.uid}:{t.sample_idx}:{len(t.prompt_ids)}:{len(t.response_ids)};".encode())
        digest.update(bytes(str(t.response_ids[:8]), "utf-8"))
    return digest.hexdigest()


def _mark_value_model(critic_dir: Path) -> None:
    """The critic's ``huggingface/config.json`` names ``AutoModelForTokenClassification``'s class, for the converter."""
    path = critic_dir / "huggingface" / "config.json"
    if not path.is_file():
        return
    config = json.loads(path.read_text())
    architectures = token_classification_architecture(config.get("architectures"))
    if architectures != config.get("architectures") or config.get("num_labels", 1) != 1:
        config["architectures"] = architectures
        write_atomic(path, json.dumps(config, indent=2) + "\n")


def save(folder: Path, actor: Any, critic: Any, global_step: int, rank: int) -> None:
    """Both models' checkpoints and the trainer state under ``folder`` (every rank calls this)."""
    actor.save_checkpoint(str(folder / "actor"), global_step=global_step)
    critic.save_checkpoint(str(folder / "critic"), global_step=global_step)
    if rank == 0:
        _mark_value_model(folder / "critic")
        write_atomic(folder / STATE_FILE, json.dumps({"global_step": global_step}) + "\n")


def load(folder: str | Path, actor: Any, critic: Any) -> int:
    """Loads both models (weights, optimizers, schedulers) from ``folder``; returns its step."""
    folder = Path(folder)
    state = folder / STATE_FILE
    for part in (folder / "actor", folder / "critic", state):
        if not part.exists():
            raise ResumeError(
                f"{part}: missing, so {folder} is not a complete OREO checkpoint; resume from another "
                "(trainer.resume_mode=resume_path) or start again (trainer.resume_mode=disable)"
            )
    try:
        global_step = int(json.loads(state.read_text())["global_step"])
    except (ValueError, KeyError, TypeError) as error:
        raise ResumeError(
            f"{state}: not a trainer state ({error}); the checkpoint is corrupt: resume from another "
            "(trainer.resume_mode=resume_path) or start again (trainer.resume_mode=disable)"
        ) from error
    actor.load_checkpoint(str(folder / "actor"))
    critic.load_checkpoint(str(folder / "critic"))
    return global_step
