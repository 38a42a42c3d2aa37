"""The worker processes behind :func:`rg_verl.reward.time_limit.call_bounded`.

Design:

* Each call checks out one worker process exclusively, so a timeout (and the kill
  that follows) never touches another caller's work: concurrent calls are not
  retried or failed because of somebody else's timeout. Up to ``max_workers``
  processes exist; extra callers wait for a free worker (the limit covers the
  execution in the worker, not that wait, so one hostile item cannot time out the
  innocent items queued behind it).
* ``timeout`` starts when the worker has unpickled the job (i.e. imported ``fn``'s
  module), so a cold import never counts as a timeout; new workers import their
  ``preload`` modules before taking work.
* Start method: ``forkserver`` (``spawn`` where unavailable). ``fork`` from a
  threaded process (Ray actors, verl reward workers with thread pools) can copy
  locks held by other threads and deadlock the child. The fork server is started
  with fork+exec (as with ``spawn``) and is single-threaded, so forking workers from
  it is safe; because it preloads sympy and math-verify, replacing a killed worker
  costs a ``fork()`` (milliseconds) instead of a fresh interpreter plus a 1-2 s
  sympy import.
* Workers (:mod:`rg_verl.reward.worker_process`) set ``PR_SET_PDEATHSIG`` (Linux) and drop their
  reference to the fork server's liveness pipe, so if the parent process dies the fork server exits and a
  worker stuck in a C-level computation is killed by the kernel rather than
  orphaned. Workers ignore SIGINT and get an address-space limit (current size plus
  ``memory_headroom``) so a runaway allocation ends in MemoryError.
* A process forked from one whose fork server runs cannot use that server (it is not the server's parent),
  so there the pool starts its workers with ``spawn``.
* A daemonic process (a ``multiprocessing.Pool`` worker, a data-loader worker) may start workers too:
  multiprocessing refuses children to such a process because they would be orphaned when it is
  terminated, and these cannot be (the fork server exits with its parent, and its workers with it through
  ``PR_SET_PDEATHSIG``), so the flag is lifted while a worker starts (:func:`_children_allowed`).
* As with all multiprocessing start methods but ``fork``, workers import the
  parent's ``__main__`` module (it must be guarded by ``if __name__ ==
  "__main__":``); the fork server imports it once and workers inherit it.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import math
import multiprocessing
import pickle
import sys
import threading
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import wait
from typing import Any, NamedTuple

from rg_verl.reward.worker_process import WorkerConfig, worker_main

__all__ = ["MAX_TIMEOUT_S", "MEMORY_HEADROOM_BYTES", "STARTUP_TIMEOUT_S", "Bounded", "Status", "WorkerPool"]

logger = logging.getLogger(__name__)

STARTUP_TIMEOUT_S = 60.0  # seconds for a new worker to import its preload modules / a job's module
MEMORY_HEADROOM_BYTES = 4 << 30  # address space a worker may add beyond its start size
MAX_TIMEOUT_S = 7 * 86400.0  # poll() cannot wait much longer
_START_WARNING_EVERY_S = 60.0  # a pool that cannot start workers says so this often, not on every call


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


_daemon_lock = threading.Lock()


@contextlib.contextmanager
def _children_allowed():
    """Lets a daemonic process start a worker: its ``daemon`` flag (the public property) is lifted meanwhile."""
    process = multiprocessing.current_process()
    if not process.daemon:
        yield
        return
    with _daemon_lock:
        process.daemon = False
        try:
            yield
        finally:
            process.daemon = True


# --- parent side -----------------------------------------------------------------------------


class _Worker(NamedTuple):
    proc: Any  # a multiprocessing Process
    conn: Any  # the parent's end of its pipe


class _Retry(Exception):
    """The worker died before accepting the job: try another one."""


def default_start_method() -> str:
    """``forkserver`` where the platform has it, else ``spawn`` (never ``fork``: see the module docstring)."""
    return "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"


def _with_forkserver_preload(ctx: Any, preload: Sequence[str]) -> None:
    """Add ``preload`` to the fork server's preloaded modules (effective only before it starts).

    The public ``set_forkserver_preload`` replaces the list; merging with what the process already set
    needs CPython's private ``forkserver._forkserver._preload_modules``. If that fails, workers still
    import ``preload`` themselves; only the fork server's head start is lost.
    """
    try:
        from multiprocessing import forkserver

        current = list(getattr(forkserver._forkserver, "_preload_modules", ["__main__"]))
        ctx.set_forkserver_preload(current + [m for m in preload if m not in current])
    except Exception as e:
        logger.debug("cannot add %s to the fork server's preload: %r", list(preload), e)


def _kill(worker: _Worker) -> None:
    proc = worker.proc
    try:
        if proc.is_alive():
            proc.kill()
        # Reaps it (for forkserver the server reaps it and reports the exit code). The
        # Process is not close()d: another thread's Process.start() may still poll it;
        # its file descriptors are released when it is garbage-collected.
        proc.join(10.0)
    except Exception as e:
        logger.debug("killing worker %s: %r", proc.pid, e)
    try:
        worker.conn.close()
    except Exception as e:
        logger.debug("closing the pipe of worker %s: %r", proc.pid, e)


def _run(worker: _Worker, payload: bytes, timeout: float, startup_timeout: float) -> Bounded:
    """Send one job to ``worker`` and wait for it; :class:`_Retry` if the worker was already dead."""
    conn = worker.conn
    try:
        conn.send_bytes(payload)
    except OSError:
        raise _Retry from None
    try:
        if not conn.poll(startup_timeout):
            return Bounded(None, Status.TIMEOUT)
        reply = pickle.loads(conn.recv_bytes())
    except (EOFError, OSError):
        raise _Retry from None
    if reply[0] != "accepted":
        return Bounded(reply[1], Status.ERROR)
    if not conn.poll(timeout):
        return Bounded(None, Status.TIMEOUT)
    reply = pickle.loads(conn.recv_bytes())
    return Bounded(reply[1], Status.OK if reply[0] == "ok" else Status.ERROR)


class WorkerPool:
    """Up to ``max_workers`` worker processes, each checked out by one call at a time."""

    def __init__(
        self,
        max_workers: int,
        preload: Sequence[str],
        memory_headroom: int | None,
        start_method: str,
        startup_timeout: float,
    ) -> None:
        self.max_workers = max(1, int(max_workers))
        self.preload = tuple(preload)
        self.memory_headroom = memory_headroom
        self.start_method = start_method
        self.startup_timeout = startup_timeout
        self._cond = threading.Condition(threading.Lock())
        self._idle: list[_Worker] = []
        self._all: set[_Worker] = set()
        self._count = 0  # live workers, including ones being started
        self._ctx: Any = None
        self._last_start_warning = -math.inf

    # -- worker lifecycle --

    def _context(self) -> Any:
        if self._ctx is None:
            ctx = multiprocessing.get_context(self.start_method)
            if self.start_method == "forkserver":
                _with_forkserver_preload(ctx, self.preload)
            self._ctx = ctx
        return self._ctx

    def _spawn(self) -> _Worker:
        ctx = self._context()
        config = WorkerConfig(
            preload=self.preload,
            memory_headroom=self.memory_headroom,
            pdeathsig=self.start_method == "forkserver" and sys.platform.startswith("linux"),
        )
        parent_conn, child_conn = ctx.Pipe(duplex=True)
        proc = ctx.Process(target=worker_main, args=(child_conn, config), name="rg-verl-bounded", daemon=True)
        try:
            with _children_allowed():
                proc.start()
        except ChildProcessError:
            # multiprocessing's fork server belongs to the process this one was forked from (a Pool or
            # data-loader worker of a process that scored before): it cannot be reached from here
            parent_conn.close()
            if self.start_method != "forkserver":
                raise
            logger.info("the fork server belongs to a parent process; bounded workers start with spawn here")
            self.start_method, self._ctx = "spawn", None
            return self._spawn()
        finally:
            child_conn.close()
        worker = _Worker(proc, parent_conn)
        try:
            # Wait for "ready", but fail fast if the process dies while starting.
            if parent_conn not in wait([parent_conn, proc.sentinel], self.startup_timeout):
                code = proc.exitcode
                if code is None:
                    raise TimeoutError(f"worker did not start within {self.startup_timeout} s")
                raise RuntimeError(f"worker exited with code {code} while starting")
            if pickle.loads(parent_conn.recv_bytes()) != ("ready",):
                raise RuntimeError("unexpected message from a new worker")
        except BaseException:
            _kill(worker)
            raise
        return worker

    def _reserve(self) -> _Worker | None:
        """An idle live worker, or None once a slot for a new one is reserved (waits while all are busy)."""
        while True:
            with self._cond:
                while not self._idle and self._count >= self.max_workers:
                    self._cond.wait()
                if not self._idle:
                    self._count += 1  # reserve a slot; the process starts outside the lock
                    return None
                worker = self._idle.pop()
                if worker.proc.is_alive():
                    return worker
                self._forget_locked(worker)
            _kill(worker)

    def _checkout(self) -> _Worker | None:
        """An idle live worker, or a new one (None if one cannot be started)."""
        worker = self._reserve()
        if worker is not None:
            return worker
        try:
            worker = self._spawn()
        except BaseException as e:
            with self._cond:
                self._count -= 1
                self._cond.notify()
            if not isinstance(e, Exception):
                raise
            now = time.monotonic()
            if now - self._last_start_warning > _START_WARNING_EVERY_S:
                self._last_start_warning = now
                logger.warning("could not start a bounded worker process (calls return 'error'): %r", e)
            return None
        with self._cond:
            self._all.add(worker)
        return worker

    def _forget_locked(self, worker: _Worker) -> None:
        if worker in self._all:
            self._all.discard(worker)
            self._count -= 1
            self._cond.notify()

    def _release(self, worker: _Worker) -> None:
        with self._cond:
            if worker in self._all:
                self._idle.append(worker)
                self._cond.notify()
                return
        _kill(worker)  # shut down while in use

    def _discard(self, worker: _Worker) -> None:
        _kill(worker)
        with self._cond:
            self._forget_locked(worker)

    def shutdown(self) -> None:
        """Kill every worker; calls still running get ``"error"``, the next call starts new ones."""
        with self._cond:
            workers = list(self._all)
            for w in workers:
                self._forget_locked(w)
            self._idle.clear()
        for w in workers:
            _kill(w)

    # -- calls --

    def call(self, fn: Callable[..., Any], payload: bytes, timeout: float, default: Any) -> Bounded:
        """Run the pickled ``(fn, args)`` ``payload`` on a worker (``fn`` only names it in logs)."""
        for attempt in range(2):
            worker = self._checkout()
            if worker is None:
                break
            healthy = False
            try:
                result = _run(worker, payload, timeout, self.startup_timeout)
                healthy = result.status is not Status.TIMEOUT
            except _Retry:
                if attempt == 0:
                    continue
                logger.debug("call_bounded: worker died before accepting %r", fn)
                break
            except Exception as e:  # worker died while running the job, bad reply, ...
                logger.debug("call_bounded: %r failed in the worker: %r", fn, e)
                break
            finally:
                if healthy:
                    self._release(worker)
                else:
                    self._discard(worker)
            if result.status is Status.OK:
                return result
            if result.status is Status.TIMEOUT:
                logger.debug("call_bounded: %r timed out after %.3g s; worker killed", fn, timeout)
            else:
                logger.debug("call_bounded: %r raised %s in the worker", fn, result.value)
            return Bounded(default, result.status)
        return Bounded(default, Status.ERROR)
