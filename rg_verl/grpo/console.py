"""Quiet progress (``trainer.console``): one line per step on the console; fds 1 and 2 go to ``logs/train-<time>.log``.

Ray's processes inherit the fds; a thread echoes the lines marked ``[rg-verl]``.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from rg_verl.common.schema import ConfigError

__all__ = ["MARK", "CONSOLE_MODES", "console_mode", "progress_line", "progress_text", "quiet_console"]

MARK = "[rg-verl]"
CONSOLE_MODES = ("auto", "progress", "full")
POLL_S = 0.2
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def console_mode(config: DictConfig, isatty: bool | None = None) -> str:
    """``progress`` or ``full``: ``trainer.console``, with ``auto`` decided by whether stdout is a terminal."""
    mode = OmegaConf.select(config, "trainer.console", default="auto")
    if mode not in CONSOLE_MODES:
        raise ConfigError(f"trainer.console: {mode!r} is not one of {', '.join(CONSOLE_MODES)}")
    if mode == "auto":
        return "progress" if (sys.stdout.isatty() if isatty is None else isatty) else "full"
    return mode


def progress_line(step: int, total: int, reward: float, accuracy: float | None, step_s: float, left_s: float) -> str:
    """The console's line for a finished training step."""
    shown = "n/a" if accuracy is None else f"{accuracy:.3f}"
    left = str(timedelta(seconds=round(left_s)))
    return f"{MARK} step {step}/{total}  reward {reward:.3f}  accuracy {shown}  {step_s:.1f} s/step  {left} left"


def progress_text(line: str) -> str | None:
    """What the console shows of a log line: from the mark on (after Ray's ``(Actor pid=...)`` prefix), or None."""
    line = _ANSI.sub("", line)
    start = line.find(MARK)
    return None if start < 0 else line[start:].rstrip()


def describe(error: BaseException) -> str:
    """The error a run failed with: the remote one where Ray wrapped it (``RayTaskError.cause``)."""
    cause = getattr(error, "cause", None)
    error = cause if isinstance(cause, BaseException) else error
    return f"{type(error).__name__}: {error}"


def log_path(config: DictConfig) -> Path:
    folder = Path(config.trainer.default_local_dir).expanduser().absolute() / "logs"
    return folder / f"train-{time.strftime('%Y%m%d-%H%M%S')}.log"


class Echo(threading.Thread):
    """Reads the log file as it grows and writes its marked lines to the console's file descriptor."""

    def __init__(self, path: Path, console_fd: int):
        super().__init__(name="rg-verl-progress", daemon=True)
        self.path, self.console_fd = path, console_fd
        self.stopping = threading.Event()

    def run(self) -> None:
        pending = b""
        with open(self.path, "rb") as log:
            while True:
                stopping = self.stopping.is_set()  # read before the last read: nothing written before stop is lost
                chunk = log.read()
                if not chunk:
                    if stopping:
                        return
                    self.stopping.wait(POLL_S)
                    continue
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    shown = progress_text(line.decode("utf-8", "replace"))
                    if shown is not None:
                        os.write(self.console_fd, (shown + "\n").encode())

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=30)


@contextlib.contextmanager
def quiet_console(config: DictConfig) -> Iterator[Path | None]:
    """Run the body with the console in ``trainer.console``'s mode; yields the log file (None in ``full``)."""
    if console_mode(config) == "full":
        yield None
        return
    path = log_path(config)
    path.parent.mkdir(parents=True, exist_ok=True)
    print(f"{MARK} verl's and Ray's logs: {path} (trainer.console=full shows them here)", flush=True)
    sys.stderr.flush()
    saved = (os.dup(1), os.dup(2))
    log_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    for fd in (1, 2):
        os.dup2(log_fd, fd)
    os.close(log_fd)
    echo = Echo(path, saved[0])
    echo.start()
    failure = None
    try:
        yield path
    except ConfigError:
        raise  # a config found wrong before Ray: the command's one-line error, not a failed run
    except Exception as error:  # noqa: BLE001 - reported below, after the console is back
        traceback.print_exc()  # into the log
        failure = error
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        echo.stop()
        for fd, copy in zip((1, 2), saved, strict=True):
            os.dup2(copy, fd)
            os.close(copy)
    if failure is not None:
        raise SystemExit(f"{MARK} the run failed: {describe(failure)}\n{MARK} the full log: {path}") from failure
    print(f"{MARK} the run finished; the full log: {path}", flush=True)
