"""Run a function in a worker process under a hard wall-clock limit, from any thread.

``call_bounded(fn, *args, timeout=, default=)`` runs ``fn(*args)`` (both picklable) in a pebble ``ProcessPool`` of
``$RG_VERL_BOUNDED_WORKERS`` (default ``min(4, cpu_count)``) workers and returns ``Bounded(value, status)``. On
``"timeout"`` (only that call's worker is killed) or ``"error"`` (it raised, its worker died, something did not
pickle) the value is ``default``. It never raises. docs/reward.md says what the workers guarantee, and why.

>>> import operator
>>> call_bounded(operator.add, 2, 3, timeout=30)
Bounded(value=5, status=<Status.OK: 'ok'>)
"""

from __future__ import annotations

import atexit
import ctypes
import enum
import importlib
import logging
import math
import multiprocessing
import multiprocessing.util
import os
import resource
import signal
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import TimeoutError as TaskTimeout
from typing import Any, NamedTuple

from pebble import CONSTS, ProcessExpired, ProcessPool

__all__ = ["MEMORY_HEADROOM_BYTES", "PRELOAD", "Bounded", "Status", "call_bounded", "configure", "shutdown"]

logger = logging.getLogger(__name__)

#: Modules every worker imports before taking work.
PRELOAD: tuple[str, ...] = ("sympy", "latex2sympy2_extended", "math_verify")
MEMORY_HEADROOM_BYTES = 4 << 30  # address space a worker may add beyond its start size
_PR_SET_PDEATHSIG = 1


class Status(str, enum.Enum):
    """Outcome of a bounded call; compares equal to the plain strings."""

    OK = "ok"
    TIMEOUT = "timeout"
    ERROR = "error"

    def __str__(self) -> str:
        return self.value


class Bounded(NamedTuple):
    value: Any
    status: Status


def _die_with_parent() -> None:
    ppid = os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != ppid:  # the parent was gone before the prctl took effect
        os._exit(1)


def _limit_memory(headroom: int) -> None:
    with open("/proc/self/statm") as f:
        limit = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE") + headroom
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = limit if hard == resource.RLIM_INFINITY else min(limit, hard)
    if soft == resource.RLIM_INFINITY or limit < soft:
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def _warm_up() -> None:
    """math-verify's first parse builds its grammar (0.1-0.3 s): a worker does that before its first call."""
    import math_verify

    math_verify.verify(math_verify.parse("$1/2$"), math_verify.parse("0.5"))


def _start_worker(preload: tuple[str, ...], headroom: int | None) -> None:
    """pebble's initializer: SIGTERM kills at once, the parent's death kills, preloads, a memory limit; best effort."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # pebble's own handler waits for the next bytecode
    steps: list[tuple[str, Callable[[], Any]]] = [("set PR_SET_PDEATHSIG", _die_with_parent)]
    steps += [(f"import {name}", lambda name=name: importlib.import_module(name)) for name in preload]
    if "math_verify" in preload:
        steps.append(("warm math-verify up", _warm_up))
    if headroom:
        steps.append(("limit its address space", lambda: _limit_memory(headroom)))
    for what, step in steps:
        try:
            step()
        except Exception as e:
            logger.debug("worker %d could not %s: %r", os.getpid(), what, e)


def _run(fn: Callable[..., Any], args: tuple) -> tuple[bool, Any]:
    """In the worker: (True, result), or (False, the exception's type name: str() of a sympy error can be slow)."""
    try:
        return True, fn(*args)
    except BaseException as e:
        return False, type(e).__name__


class _Workers:
    """A pebble pool, started from a thread that lives as long as it: PR_SET_PDEATHSIG follows the forking thread."""

    def __init__(self, max_workers: int, preload: tuple[str, ...], headroom: int | None) -> None:
        context = multiprocessing.get_context("spawn")  # never fork a threaded process
        self.pool = ProcessPool(max_workers, initializer=_start_worker, initargs=(preload, headroom), context=context)
        self.stopped, self.running = threading.Event(), set()
        started = threading.Event()
        threading.Thread(target=self._keep, args=(started,), name="rg-verl-bounded", daemon=True).start()
        started.wait()

    def _keep(self, started: threading.Event) -> None:
        try:
            self.pool.active  # noqa: B018 - starts the first workers, from this thread
        finally:
            started.set()
        self.stopped.wait()

    def shutdown(self) -> None:
        self.pool.stop()
        self.pool.join()
        self.stopped.set()
        for future in list(self.running):  # a call still waiting gets "error"
            future.cancel()


_lock = threading.Lock()
_workers: _Workers | None = None
_settings: dict[str, Any] = {}
_finalizing: list[Any] = []


def _env_workers() -> int:
    try:
        return max(1, int(os.environ.get("RG_VERL_BOUNDED_WORKERS", "")))
    except ValueError:
        return max(1, min(4, os.cpu_count() or 1))


def _get_workers() -> _Workers:
    global _workers
    with _lock:
        if _workers is None or not _workers.pool.active:  # never started, or broken
            if _workers is not None:
                _workers.shutdown()
            if multiprocessing.current_process().daemon:  # a Pool or data-loader worker: see docs/reward.md
                multiprocessing.current_process().daemon = False
            if not _finalizing:  # a multiprocessing child joins its live children as it exits: stop them first
                _finalizing.append(multiprocessing.util.Finalize(None, shutdown, exitpriority=100))
            # how often pebble looks for an overrun (its default, 0.1 s, would let a 0.9 s limit pass 1 s)
            CONSTS.sleep_unit = 0.02
            _workers = _Workers(
                _settings.get("max_workers") or _env_workers(),
                _settings.get("preload", PRELOAD),
                _settings.get("memory_headroom_bytes", MEMORY_HEADROOM_BYTES),
            )
        return _workers


def configure(
    *, max_workers: int | None = None, preload: Iterable[str] | None = None, memory_headroom_bytes: int | None = None
) -> None:
    """Replaces the pool's settings and shuts its workers down; ``configure()`` restores the defaults (for tests).

    Args:
        max_workers: Worker processes, the most calls that run at once (default ``$RG_VERL_BOUNDED_WORKERS``).
        preload: Modules each worker imports before taking work (default :data:`PRELOAD`).
        memory_headroom_bytes: Address space a worker may grow by (default :data:`MEMORY_HEADROOM_BYTES`).
    """
    with _lock:
        _settings.clear()
        _settings.update(max_workers=max_workers, preload=PRELOAD if preload is None else tuple(preload))
        _settings.update(memory_headroom_bytes=memory_headroom_bytes or MEMORY_HEADROOM_BYTES)
    shutdown()


def call_bounded(fn: Callable[..., Any], /, *args: Any, timeout: float, default: Any = None) -> Bounded:
    """``fn(*args)`` in a worker process, whose worker is killed once it has run ``timeout`` seconds."""
    try:
        seconds = float(timeout)
    except (TypeError, ValueError):
        seconds = math.nan
    if not (seconds > 0 and math.isfinite(seconds)):
        logger.warning("call_bounded: timeout must be a positive finite number, got %r", timeout)
        return Bounded(default, Status.ERROR)
    try:
        workers = _get_workers()
        future = workers.pool.schedule(_run, args=(fn, args), timeout=seconds)
        workers.running.add(future)
        try:
            ok, value = future.result()
        finally:
            workers.running.discard(future)
    except TaskTimeout:
        logger.debug("call_bounded: %r timed out after %.3g s; worker killed", fn, seconds)
        return Bounded(default, Status.TIMEOUT)
    except ProcessExpired as e:
        logger.debug("call_bounded: the worker running %r died: %r", fn, e)
        return Bounded(default, Status.ERROR)
    except Exception as e:  # fn, args or the result did not pickle; the pool was shut down
        logger.warning("call_bounded: %r failed: %r", fn, e)
        return Bounded(default, Status.ERROR)
    if not ok:
        logger.debug("call_bounded: %r raised %s in the worker", fn, value)
    return Bounded(value, Status.OK) if ok else Bounded(default, Status.ERROR)


def shutdown() -> None:
    """Kills all worker processes; the next call starts new ones."""
    global _workers
    with _lock:
        workers, _workers = _workers, None
    if workers is not None:
        workers.shutdown()


def _forget_after_fork() -> None:
    # the workers belong to the parent: a forked child forgets them, without killing them
    global _workers, _lock
    _lock, _workers = threading.Lock(), None
    _finalizing.clear()


os.register_at_fork(after_in_child=_forget_after_fork)
atexit.register(shutdown)
