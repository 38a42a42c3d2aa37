"""Run a function with a hard wall-clock limit, from any thread.

Reward functions score untrusted model output with sympy and math-verify, which can
run for hours on inputs such as ``9^{9^{9^{9}}}``. Threads cannot be interrupted and
math-verify's ``signal.alarm`` timeouts only work in the main thread, so the work runs
in a small pool of worker processes and a worker that overruns its limit is killed
(SIGKILL) and replaced (:mod:`rg_verl.reward.worker_pool` has the design).

    value, status = call_bounded(fn, *args, timeout=1.0, default=0.0)

* ``fn`` and ``args`` must be picklable (``fn`` a module-level function, or a
  ``functools.partial`` of one); the result must be picklable too.
* ``status`` is :class:`Status` ``"ok"``, ``"timeout"`` or ``"error"``; on timeout or
  error ``value`` is ``default``. Nothing is raised.
* Safe from any thread, including executor threads of a running asyncio loop (the
  call blocks the calling thread; do not call it on the event-loop thread itself if
  blocking the loop for ``timeout`` matters).
* The pool starts on the first call with ``$RG_VERL_BOUNDED_WORKERS`` (default
  ``min(4, cpu_count)``) workers; :func:`shutdown` kills them, and the process does so at exit.

>>> import operator
>>> call_bounded(operator.add, 2, 3, timeout=30)
Bounded(value=5, status=<Status.OK: 'ok'>)
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import pickle
import threading
from collections.abc import Callable, Iterable
from typing import Any

from rg_verl.reward.worker_pool import (
    MAX_TIMEOUT_S,
    MEMORY_HEADROOM_BYTES,
    STARTUP_TIMEOUT_S,
    Bounded,
    Status,
    WorkerPool,
    default_start_method,
)

__all__ = ["PRELOAD", "Bounded", "Status", "call_bounded", "configure", "shutdown"]

logger = logging.getLogger(__name__)

#: Modules every worker imports before taking work (and the fork server preloads).
PRELOAD: tuple[str, ...] = ("sympy", "latex2sympy2_extended", "math_verify")

_DEFAULT_MAX_WORKERS = max(1, min(4, os.cpu_count() or 1))

_pool_lock = threading.Lock()
_pool: WorkerPool | None = None
_settings: dict[str, Any] = {}


def _env_workers() -> int:
    try:
        return int(os.environ.get("RG_VERL_BOUNDED_WORKERS", _DEFAULT_MAX_WORKERS))
    except ValueError:
        return _DEFAULT_MAX_WORKERS


def _get_pool() -> WorkerPool:
    global _pool
    pool = _pool
    if pool is None:
        with _pool_lock:
            if _pool is None:
                _pool = WorkerPool(
                    max_workers=_settings.get("max_workers") or _env_workers(),
                    preload=_settings.get("preload", PRELOAD),
                    memory_headroom=_settings.get("memory_headroom_bytes", MEMORY_HEADROOM_BYTES),
                    start_method=_settings.get("start_method") or default_start_method(),
                    startup_timeout=_settings.get("startup_timeout", STARTUP_TIMEOUT_S),
                )
            pool = _pool
    return pool


def configure(
    *,
    max_workers: int | None = None,
    preload: Iterable[str] | None = None,
    memory_headroom_bytes: int | None = MEMORY_HEADROOM_BYTES,
    start_method: str | None = None,
    startup_timeout: float = STARTUP_TIMEOUT_S,
) -> None:
    """Replaces the process pool settings (existing workers are shut down).

    The explicit hook for tests (one worker, a small memory limit, no preload): the reward and
    training never call it, and ``configure()`` with no arguments restores the defaults.

    Args:
        max_workers: Worker processes (default ``$RG_VERL_BOUNDED_WORKERS`` or
            ``min(4, cpu_count)``); also the most calls that run at once.
        preload: Modules each worker imports before taking work (default
            :data:`PRELOAD`); add the modules of the functions you will call (e.g.
            ``reasoning_gym``) so a fresh worker does not import them on a job.
        memory_headroom_bytes: Address space a worker may grow by; None: no limit.
        start_method: ``"forkserver"`` (default on Linux) or ``"spawn"``.
        startup_timeout: Seconds allowed for a worker to start or import a job.
    """
    global _pool
    with _pool_lock:
        old, _pool = _pool, None
        _settings.clear()
        _settings.update(
            max_workers=max_workers,
            preload=PRELOAD if preload is None else tuple(preload),
            memory_headroom_bytes=memory_headroom_bytes,
            start_method=start_method,
            startup_timeout=startup_timeout,
        )
    if old is not None:
        old.shutdown()


def _checked_timeout(timeout: Any) -> float | None:
    """``timeout`` as seconds the pool can wait, or None if it is not a positive finite number."""
    try:
        timeout = float(timeout)
    except (TypeError, ValueError):
        return None
    return min(timeout, MAX_TIMEOUT_S) if timeout > 0 and math.isfinite(timeout) else None


def call_bounded(fn: Callable[..., Any], /, *args: Any, timeout: float, default: Any = None) -> Bounded:
    """Runs ``fn(*args)`` in a worker process, killing it after ``timeout`` seconds.

    Returns:
        ``(value, status)``: ``(fn(*args), "ok")``, or ``(default, "timeout")`` if it
        ran longer than ``timeout`` (the worker is killed and replaced), or
        ``(default, "error")`` if ``fn`` raised, the worker died, or ``fn``/``args``/the
        result could not be pickled. Never raises (except KeyboardInterrupt).
    """
    seconds = _checked_timeout(timeout)
    if seconds is None:
        logger.warning("call_bounded: timeout must be a positive finite number, got %r", timeout)
        return Bounded(default, Status.ERROR)
    try:
        payload = pickle.dumps((fn, args), pickle.HIGHEST_PROTOCOL)
    except Exception as e:
        logger.warning("call_bounded: cannot pickle %r: %r", fn, e)
        return Bounded(default, Status.ERROR)
    try:
        return _get_pool().call(fn, payload, seconds, default)
    except Exception as e:  # defensive: never raise into the caller
        logger.warning("call_bounded: unexpected failure: %r", e)
        return Bounded(default, Status.ERROR)


def shutdown() -> None:
    """Kills all worker processes; the next call starts new ones."""
    pool = _pool
    if pool is not None:
        pool.shutdown()


def _after_fork_in_child() -> None:
    # The workers belong to the parent: forget them (without killing) in a forked child.
    global _pool, _pool_lock
    _pool_lock = threading.Lock()
    _pool = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(shutdown)
