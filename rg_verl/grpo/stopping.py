"""How a run ends early: Ctrl-C, SIGTERM or a dead rollout engine ends it in seconds, with one line."""

from __future__ import annotations

import logging
import os
import shlex
import signal
import sys
import threading
from pathlib import Path

from rg_verl.grpo.console import MARK
from rg_verl.grpo.resume import checkpoint_state

__all__ = ["Interrupted", "RunStopped", "StopSignals", "resume_command", "stop_line", "teardown", "typed_argv"]

logger = logging.getLogger(__name__)

# how long ray.shutdown() may take before the run's processes are killed instead, and how long they then get
SHUTDOWN_S = 15.0
TERM_GRACE_S = 3.0


class Interrupted(KeyboardInterrupt):
    """Raised in the main thread by a stop signal or a dead engine; the one exception Ray's ``ray.get`` lets through."""


class RunStopped(SystemExit):
    """The run stopped early: ``line`` to print, ``code``; ``hard_exit``: Ray hung, so the command uses ``os._exit``."""

    def __init__(self, line: str, code: int, hard_exit: bool = False):
        super().__init__(code)
        self.line, self.hard_exit = line, hard_exit


def run_processes(exclude: set[int] = frozenset()) -> list:
    """This process's descendants now (psutil processes), but those in ``exclude``."""
    import psutil

    try:
        return [p for p in psutil.Process().children(recursive=True) if p.pid not in exclude]
    except psutil.Error:
        return []


def end_processes(processes: list, grace_s: float = TERM_GRACE_S) -> list:
    """SIGTERM ``processes``, SIGKILL what is left after ``grace_s``; returns those that had to be killed."""
    import psutil

    alive = [p for p in processes if p.is_running()]
    for process in alive:
        try:
            process.terminate()
        except psutil.Error:
            pass
    _, left = psutil.wait_procs(alive, timeout=grace_s)
    for process in left:
        try:
            process.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(left, timeout=grace_s)
    return left


def teardown(ours: bool, exclude: set[int] = frozenset(), shutdown_s: float = SHUTDOWN_S) -> bool:
    """``ray.shutdown()`` within ``shutdown_s``, then, where Ray is ``ours``, the run's other processes killed (not
    ``exclude``). Returns whether Ray shut down in time."""
    import ray

    processes = run_processes(exclude) if ours else []  # before Ray goes: its orphans are no longer our descendants
    stopper = threading.Thread(target=ray.shutdown, name="rg-verl-ray-shutdown", daemon=True)
    stopper.start()
    stopper.join(shutdown_s)
    if stopper.is_alive():
        logger.warning("ray.shutdown() still running after %.0f s; ending the run's processes", shutdown_s)
    end_processes(processes)
    return not stopper.is_alive()


class StopSignals:
    """SIGINT and SIGTERM (or :meth:`fire`, from any thread) raise :class:`Interrupted` in the main thread; a second
    signal, or one after :meth:`tearing_down`, kills the run's processes and exits. Outside the main thread: nothing."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
        self.reason: str | None = None
        self.code = 1
        self.before: set[int] = set()
        self._now = False  # the next signal ends everything at once
        self._saved: dict[int, object] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            self.before = {p.pid for p in run_processes()}
            self._saved = {sig: signal.getsignal(sig) for sig in self.SIGNALS}
            self.install()
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._saved.items():
            signal.signal(sig, handler)

    def install(self) -> None:
        """Our handlers, again (from the main thread, while the block runs)."""
        if self._saved and threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                signal.signal(sig, self._handle)

    def _handle(self, signum, frame) -> None:
        if self._now:
            print(f"{MARK} {signal.Signals(signum).name} again: killing the run's processes", file=sys.stderr)
            end_processes(run_processes(self.before), grace_s=0.5)
            os._exit(128 + signum)
        if self.reason is None:  # a signal of the user's; a dead engine set its own reason before firing
            self.reason, self.code = f"interrupted by {signal.Signals(signum).name}", 128 + signum
        self._now = True
        raise Interrupted(self.reason)

    def fire(self, reason: str) -> None:
        """Stop the run for ``reason`` (from any thread): the main thread gets :class:`Interrupted`."""
        if self.reason is not None or not self._saved:
            return
        self.reason, self.code = reason, 1
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    def tearing_down(self) -> None:
        """From now on a signal means "now": the run's processes are killed and the process exits."""
        self._now = True


def typed_argv(orig_argv: list[str] | None = None) -> list[str]:
    """The script and the arguments the user typed (``sys.orig_argv`` less the interpreter and its options; the
    command line sets ``sys.argv`` to Hydra's for the length of the run)."""
    argv = list(sys.orig_argv if orig_argv is None else orig_argv)[1:]
    while argv and argv[0].startswith("-") and argv[0] not in ("-m", "-c"):
        argv = argv[2:] if argv[0] in ("-X", "-W") else argv[1:]
    return argv if argv and not argv[0].startswith("-") else list(sys.argv)


def resume_command(argv: list[str] | None = None) -> str:
    """The command line that ran this process, as a user would type it again."""
    argv = typed_argv() if argv is None else list(argv)
    if argv and argv[0].endswith(".py"):
        return shlex.join(["python", *argv])
    return shlex.join([os.path.basename(argv[0]) if argv else "rg-verl", *argv[1:]])


def stop_line(reason: str, folder: str | os.PathLike, command: str | None = None, resume_mode: str = "auto") -> str:
    """The line a run that stopped early ends with: ``reason``, the checkpoints in ``folder``, how to resume."""
    folder = Path(folder).expanduser().absolute()
    step, interrupted = checkpoint_state(folder)
    saved = "no complete checkpoint" if step is None else f"the last complete checkpoint is step {step} in {folder}"
    if interrupted:
        steps = ", ".join(f"global_step_{s}" for s in interrupted)
        saved += f" ({steps}: an interrupted save, which the rerun reports and passes over)"
    if command is None:
        argv = [arg for arg in typed_argv() if not arg.lstrip("+").startswith("trainer.resume_mode=")]
        command = resume_command(argv + ["trainer.resume_mode=auto"] if resume_mode != "auto" else argv)
    again = "resume with" if step is not None else "start again with"
    return f"{MARK} the run stopped: {reason}; {saved}; {again}: {command}"
