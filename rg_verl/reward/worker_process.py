"""What runs in a bounded worker process of :mod:`rg_verl.reward.worker_pool`: its start, then its job loop.

A new worker ignores SIGINT, sets ``PR_SET_PDEATHSIG`` (under a fork server, so that it dies with its parent
process), imports its preload modules and limits its address space, each best effort; then it says
``("ready",)`` and answers each job (a pickled ``(fn, args)``) with ``("accepted",)`` once unpickled and
``("ok", result)`` or ``("error", type name)`` when done.
"""

from __future__ import annotations

import logging
import os
import pickle
import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["WorkerConfig", "worker_main"]

logger = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class WorkerConfig:
    preload: tuple[str, ...]
    memory_headroom: int | None
    pdeathsig: bool


def _drop_forkserver_alive_fd() -> None:
    """Close this worker's copy of the fork server's "alive" pipe, or it keeps the server alive.

    A fork server that outlives a dead parent keeps PDEATHSIG from firing. multiprocessing has no public
    way to reach that pipe, hence CPython's private ``forkserver._forkserver._forkserver_alive_fd``; if it
    moves, this logs and the only loss is that orphaned workers are no longer killed.
    """
    try:
        from multiprocessing import forkserver

        fd = forkserver._forkserver._forkserver_alive_fd
        if fd is not None:
            os.close(fd)
            forkserver._forkserver._forkserver_alive_fd = None
    except Exception as e:
        logger.debug("worker cannot drop the fork server's alive pipe: %r", e)


def _set_pdeathsig() -> None:
    import ctypes

    ppid = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != ppid:  # parent already gone before the prctl took effect
        os._exit(1)
    _drop_forkserver_alive_fd()


def _limit_memory(headroom: int) -> None:
    import resource

    with open("/proc/self/statm") as f:
        current = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = current + headroom
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    if soft == resource.RLIM_INFINITY or limit < soft:
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def _prepare_worker(config: WorkerConfig) -> None:
    """Signals, preloads and limits of a new worker; each step is best effort (a failure is logged)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    steps: list[tuple[str, Callable[[], Any]]] = []
    if config.pdeathsig:
        steps.append(("set PR_SET_PDEATHSIG", _set_pdeathsig))
    steps += [(f"import {name}", lambda name=name: __import__(name)) for name in config.preload]
    if config.memory_headroom:
        steps.append(("limit its address space", lambda: _limit_memory(config.memory_headroom)))
    for what, step in steps:
        try:
            step()
        except Exception as e:
            logger.debug("worker %d could not %s: %r", os.getpid(), what, e)


def worker_main(conn: Any, config: WorkerConfig) -> None:
    _prepare_worker(config)
    dumps = pickle.dumps
    try:
        conn.send_bytes(dumps(("ready",)))
        while True:
            data = conn.recv_bytes()
            try:
                fn, args = pickle.loads(data)
            except BaseException as e:
                conn.send_bytes(dumps(("error", f"could not load job: {type(e).__name__}")))
                continue
            del data
            conn.send_bytes(dumps(("accepted",)))
            try:
                out = dumps(("ok", fn(*args)), pickle.HIGHEST_PROTOCOL)
            except BaseException as e:
                # Only the type: str() of a sympy exception can itself be very slow.
                out = dumps(("error", type(e).__name__))
            del fn, args
            conn.send_bytes(out)
    except (EOFError, OSError):  # the parent closed the pipe or went away
        return
