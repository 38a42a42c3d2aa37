"""The checkpoint a run resumes from, checked before Ray starts (docs/configs.md): complete, or a clear error."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from omegaconf import DictConfig

from rg_verl.common.schema import ConfigError

__all__ = ["TRACKER", "check_resume", "checkpoint_state", "checkpoint_steps", "missing_parts"]

logger = logging.getLogger(__name__)

TRACKER = "latest_checkpointed_iteration.txt"
_STEP_DIR = re.compile(r"^global_step_(\d+)$")
_SHARD = re.compile(r"^(model|optim|extra_state)_world_size_(\d+)_rank_(\d+)\.pt$")


def checkpoint_steps(folder: Path) -> list[int]:
    """The steps of the ``global_step_N`` folders in ``folder``, in order."""
    if not folder.is_dir():
        return []
    return sorted(int(m.group(1)) for p in folder.iterdir() if p.is_dir() and (m := _STEP_DIR.match(p.name)))


def _missing_shards(model_dir: Path) -> list[str]:
    shards: dict[str, dict[int, set[int]]] = {}
    for path in model_dir.iterdir():
        if m := _SHARD.match(path.name):
            shards.setdefault(m.group(1), {}).setdefault(int(m.group(2)), set()).add(int(m.group(3)))
    if "model" not in shards:
        return [f"{model_dir.name}/model_world_size_*_rank_*.pt"]
    missing = []
    for kind, sizes in shards.items():
        for size, ranks in sizes.items():
            missing += [f"{model_dir.name}/{kind}_world_size_{size}_rank_{r}.pt" for r in range(size) if r not in ranks]
    return missing


def missing_parts(step_dir: Path) -> list[str]:
    """What a ``global_step_N`` folder lacks to be a complete checkpoint (empty: complete)."""
    missing = [] if (step_dir / "data.pt").is_file() else ["data.pt"]
    if not (step_dir / "actor").is_dir():
        return [*missing, "actor/"]
    for name in ("actor", "critic"):
        if (step_dir / name).is_dir():
            missing += _missing_shards(step_dir / name)
    return missing


def checkpoint_state(folder: Path) -> tuple[int | None, list[int]]:
    """The step ``folder``'s tracker names (None: none or unreadable), and the interrupted saves past it."""
    try:
        step = _tracked_step(folder)
    except ConfigError:
        step = None
    return step, [s for s in checkpoint_steps(folder) if step is None or s > step]


def _tracked_step(folder: Path) -> int | None:
    tracker = folder / TRACKER
    if not tracker.exists():
        return None
    text = tracker.read_text(errors="replace").strip()
    if not text.isdigit():
        complete = [s for s in checkpoint_steps(folder) if not missing_parts(folder / f"global_step_{s}")]
        fix = f"write {complete[-1]} into it (the last complete checkpoint)" if complete else "delete it"
        raise ConfigError(
            f"{tracker}: holds {text[:40]!r}, not a step number (a save was interrupted while writing it); {fix}, "
            "or set trainer.resume_mode=disable to start from scratch"
        )
    return int(text)


def _check_complete(step_dir: Path, what: str) -> None:
    if not step_dir.is_dir():
        raise ConfigError(
            f"{what}: {step_dir} does not exist; verl would start from scratch without a word. Point it at a "
            "complete global_step_N folder, or set trainer.resume_mode=disable to start from scratch"
        )
    missing = missing_parts(step_dir)
    if missing:
        raise ConfigError(
            f"{what}: {step_dir} is incomplete (it lacks {', '.join(missing[:4])}); resume from an earlier complete "
            "checkpoint, or set trainer.resume_mode=disable to start from scratch"
        )


def check_resume(config: DictConfig) -> int | None:
    """The step the run resumes from (None: from scratch); warns about each interrupted save it passes over."""
    trainer = config.trainer
    mode = trainer.get("resume_mode", "auto")
    if mode == "resume_path":
        path = Path(os.path.abspath(str(trainer.get("resume_from_path"))))
        _check_complete(path, "trainer.resume_from_path")
        return int(_STEP_DIR.match(path.name).group(1)) if _STEP_DIR.match(path.name) else None
    if mode != "auto":
        return None
    folder = Path(os.path.abspath(os.path.expanduser(str(trainer.default_local_dir))))
    step = _tracked_step(folder)
    if step is not None:
        _check_complete(folder / f"global_step_{step}", f"{folder / TRACKER} (step {step})")
    for later in (s for s in checkpoint_steps(folder) if step is None or s > step):
        logger.warning(
            "%s is an interrupted save (it is past the last complete checkpoint%s); the run does not use it. "
            "Delete it once you have looked: the run saves that step again when it gets there",
            folder / f"global_step_{later}", f", step {step}" if step is not None else "",
        )  # fmt: skip
    return step
