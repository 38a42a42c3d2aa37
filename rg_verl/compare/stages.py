"""A comparison's stages: each one of the project's own commands, run as a child process with its log in a file."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from rg_verl.common.compose import repo_root
from rg_verl.grpo.console import progress_text

__all__ = ["StageError", "Stages"]

logger = logging.getLogger(__name__)

TRACKER = "latest_checkpointed_iteration.txt"
CONVERTED = "config.json"


class StageError(RuntimeError):
    """A stage's command failed: the message names the stage, the exit status and the log file."""


def latest_step(folder: Path) -> int | None:
    """The step verl's tracker file in ``folder`` names (the last complete checkpoint), or None."""
    tracker = folder / TRACKER
    if not tracker.is_file():
        return None
    text = tracker.read_text().strip()
    return int(text) if text.isdigit() else None


class Stages:
    """Runs the stages of one comparison under ``out``, logging each to ``out/logs/<name>.log``."""

    def __init__(self, out: Path, device: str, gpus: int = 1):
        self.out, self.device, self.gpus = out, device, gpus
        self.logs = out / "logs"
        self.python = sys.executable

    def run(self, name: str, command: Sequence[str], env: dict[str, str] | None = None) -> None:
        """``command`` logged to the stage's file, its progress lines on the console; :class:`StageError` on failure."""
        self.logs.mkdir(parents=True, exist_ok=True)
        log = self.logs / f"{name}.log"
        logger.info("%s: %s (log: %s)", name, " ".join(command), log)
        # unbuffered: a progress line shows when the stage prints it, not when its buffer fills
        environ = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo_root()), os.environ.get("PYTHONPATH", "")]),
                   "PYTHONUNBUFFERED": "1", **(env or {})}  # fmt: skip
        with open(log, "a") as handle:
            handle.write(f"$ {' '.join(command)}\n")
            handle.flush()
            code = _run_echoing(command, environ, handle)
        if code:
            tail = "".join(log.read_text(errors="replace").splitlines(keepends=True)[-15:])
            raise StageError(f"stage {name} failed (exit status {code}); its log is {log}:\n{tail}")

    def launcher(self) -> list[str]:
        """The command prefix of a training process: this Python on a CPU, torchrun with ``gpus`` processes on GPUs."""
        if self.device == "cpu":
            return [self.python]
        return [self.python, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={self.gpus}"]

    def collect(self, name: str, out: Path, train: Sequence[str], options: Sequence[str]) -> Path:
        """``rg-verl oreo collect`` into ``out`` (continued with ``--resume`` when begun)."""
        if not _complete(out):
            resume = ["--resume"] if (out / "manifest.json").is_file() else []
            self.run(name, [self.python, "-m", "rg_verl.cli", "oreo", "collect", *train, "--out", str(out),
                            *options, *resume])  # fmt: skip
        return out

    def convert(self, name: str, checkpoint: Path, out: Path) -> Path:
        """``utils/load_fsdp_to_hf.py checkpoint out``, unless ``out`` already holds a converted model."""
        if not (out / CONVERTED).is_file():
            self.run(name, [self.python, str(repo_root() / "utils" / "load_fsdp_to_hf.py"), str(checkpoint), str(out)])
        return out


def _run_echoing(command: Sequence[str], environ: dict[str, str], log: IO[str]) -> int:
    """Run ``command``, every line of its output into ``log`` and its progress lines to stdout; its exit status."""
    with subprocess.Popen(list(command), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=environ, text=True,
                          errors="replace", bufsize=1) as child:  # fmt: skip
        for line in child.stdout:
            log.write(line)
            log.flush()
            shown = progress_text(line)
            if shown is not None:
                print(shown, flush=True)
    return child.returncode


def _complete(collection: Path) -> bool:
    """Whether the collection's manifest says it is complete (no manifest: not begun)."""
    try:
        return bool(json.loads((collection / "manifest.json").read_text()).get("complete"))
    except (OSError, ValueError):
        return False
