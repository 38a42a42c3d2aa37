"""Run a function with a hard wall-clock limit, from any thread.

Reward functions score untrusted model output with sympy and math-verify, which can
run for hours on inputs such as ``9^{9^{9^{9}}}``. Threads cannot be interrupted and
math-verify's ``signal.alarm`` timeouts only work in the main thread, so the work runs
in a small pool of worker processes and a worker that overruns its limit is killed
(SIGKILL) and replaced.

    value, status = call_bounded(fn, *args, timeout=1.0, default=0.0)

* ``fn`` and ``args`` must be picklable (``fn`` a module-level function, or a
  ``functools.partial`` of one); the result must be picklable too.
* ``status`` is :class:`Status` ``"ok"``, ``"timeout"`` or ``"error"``; on timeout or
  error ``value`` is ``default``. Nothing is raised.
* Safe from any thread, including executor threads of a running asyncio loop (the
  call blocks the calling thread; do not call it on the event-loop thread itself if
  blocking the loop for ``timeout`` matters).

Design:

* Each call checks out one worker process exclusively, so a timeout (and the kill
  that follows) never touches another caller's work: concurrent calls are not
  retried or failed because of somebody else's timeout. Up to ``max_workers``
  processes exist; extra callers wait for a free worker (the limit covers the
  execution in the worker, not that wait, so one hostile item cannot time out the
  innocent items queued behind it).
* ``timeout`` starts when the worker has unpickled the job (i.e. imported ``fn``'s
  module), so a cold import never counts as a timeout; new workers import
  :data:`PRELOAD` before taking work.
* Start method: ``forkserver`` (``spawn`` where unavailable). ``fork`` from a
  threaded process (Ray actors, verl reward workers with thread pools) can copy
  locks held by other threads and deadlock the child. The fork server is started
  with fork+exec (as with ``spawn``) and is single-threaded, so forking workers from
  it is safe; because it preloads sympy and math-verify, replacing a killed worker
  costs a ``fork()`` (milliseconds) instead of a fresh interpreter plus a 1-2 s
  sympy import.
* Workers set ``PR_SET_PDEATHSIG`` (Linux) and drop their reference to the fork
  server's liveness pipe, so if the parent process dies the fork server exits and a
  worker stuck in a C-level computation is killed by the kernel rather than
  orphaned. Workers ignore SIGINT and get an address-space limit (current size plus
  ``memory_headroom_bytes``) so a runaway allocation ends in MemoryError.
* As with all multiprocessing start methods but ``fork``, workers import the
  parent's ``__main__`` module (it must be guarded by ``if __name__ ==
  "__main__":``); the fork server imports it once and workers inherit it.
"""

from __future__ import annotations

import atexit
import enum
import logging
import math
import multiprocessing
import os
import pickle
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing.connection import wait as _wait
from typing import Any, NamedTuple

__all__ = [
    "MAX_ANSWER_CHARS",
    "PRELOAD",
    "Bounded",
    "Status",
    "call_bounded",
    "configure",
    "map_bounded",
    "shutdown",
    "warmup",
    "within_size",
]

logger = logging.getLogger(__name__)

#: Longest model answer (characters) worth parsing; longer ones score 0 without parsing.
MAX_ANSWER_CHARS = 10_000

#: Modules every worker imports before taking work (and the fork server preloads).
PRELOAD: tuple[str, ...] = ("sympy", "latex2sympy2_extended", "math_verify")

_DEFAULT_MAX_WORKERS = max(1, min(4, os.cpu_count() or 1))
_STARTUP_TIMEOUT = 60.0  # seconds for a new worker to import PRELOAD / a job's module
_MEMORY_HEADROOM = 4 << 30  # bytes of address space a worker may add beyond its start size
_PR_SET_PDEATHSIG = 1
_MAX_TIMEOUT = 7 * 86400.0  # poll() cannot wait much longer


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


def within_size(text: Any, max_chars: int = MAX_ANSWER_CHARS) -> bool:
    """True iff ``text`` is a ``str`` of at most ``max_chars`` characters."""
    return isinstance(text, str) and len(text) <= max_chars


# --- worker process --------------------------------------------------------------------------


@dataclass(frozen=True)
class _WorkerConfig:
    preload: tuple[str, ...]
    memory_headroom: int | None
    pdeathsig: bool


def _set_pdeathsig() -> None:
    import ctypes

    ppid = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != ppid:  # parent already gone before the prctl took effect
        os._exit(1)
    # Workers otherwise keep the fork server alive (they hold its "alive" pipe), so it
    # would outlive a dead parent and PDEATHSIG would never fire.
    try:
        from multiprocessing import forkserver

        fd = forkserver._forkserver._forkserver_alive_fd
        if fd is not None:
            os.close(fd)
            forkserver._forkserver._forkserver_alive_fd = None
    except Exception:
        pass


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


def _worker_main(conn: Any, config: _WorkerConfig) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if config.pdeathsig:
        try:
            _set_pdeathsig()
        except Exception:
            pass
    for name in config.preload:
        try:
            __import__(name)
        except Exception:
            pass
    if config.memory_headroom:
        try:
            _limit_memory(config.memory_headroom)
        except Exception:
            pass
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


# --- parent side -----------------------------------------------------------------------------


class _Worker:
    __slots__ = ("proc", "conn")

    def __init__(self, proc: Any, conn: Any) -> None:
        self.proc = proc
        self.conn = conn


class _Retry(Exception):
    """The worker died before accepting the job: try another one."""


def _start_method() -> str:
    methods = multiprocessing.get_all_start_methods()
    return "forkserver" if "forkserver" in methods else "spawn"


class _Pool:
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
                try:
                    from multiprocessing import forkserver

                    # Merge with whatever is already configured; only effective if the
                    # server is not running yet (otherwise workers import PRELOAD themselves).
                    current = list(getattr(forkserver._forkserver, "_preload_modules", ["__main__"]))
                    ctx.set_forkserver_preload(current + [m for m in self.preload if m not in current])
                except Exception:
                    pass
            self._ctx = ctx
        return self._ctx

    def _spawn(self) -> _Worker:
        ctx = self._context()
        config = _WorkerConfig(
            preload=self.preload,
            memory_headroom=self.memory_headroom,
            pdeathsig=self.start_method == "forkserver" and sys.platform.startswith("linux"),
        )
        parent_conn, child_conn = ctx.Pipe(duplex=True)
        proc = ctx.Process(target=_worker_main, args=(child_conn, config), name="rg-verl-bounded", daemon=True)
        try:
            proc.start()
        finally:
            child_conn.close()
        worker = _Worker(proc, parent_conn)
        try:
            # Wait for "ready", but fail fast if the process dies while starting.
            if parent_conn not in _wait([parent_conn, proc.sentinel], self.startup_timeout):
                code = proc.exitcode
                if code is None:
                    raise TimeoutError(f"worker did not start within {self.startup_timeout} s")
                raise RuntimeError(f"worker exited with code {code} while starting")
            if pickle.loads(parent_conn.recv_bytes()) != ("ready",):
                raise RuntimeError("unexpected message from a new worker")
        except BaseException:
            self._kill(worker)
            raise
        return worker

    @staticmethod
    def _kill(worker: _Worker) -> None:
        proc = worker.proc
        try:
            if proc.is_alive():
                proc.kill()
            # Reaps it (for forkserver the server reaps it and reports the exit code). The
            # Process is not close()d: another thread's Process.start() may still poll it;
            # its file descriptors are released when it is garbage-collected.
            proc.join(10.0)
        except Exception:
            pass
        try:
            worker.conn.close()
        except Exception:
            pass

    def _checkout(self) -> _Worker | None:
        """An idle live worker, or a new one (None if one cannot be started)."""
        while True:
            dead = None
            with self._cond:
                while True:
                    if self._idle:
                        worker = self._idle.pop()
                        if worker.proc.is_alive():
                            return worker
                        self._forget_locked(worker)
                        dead = worker
                        break
                    if self._count < self.max_workers:
                        self._count += 1  # reserve a slot; start the process outside the lock
                        break
                    self._cond.wait()
            if dead is None:
                break
            self._kill(dead)
        try:
            worker = self._spawn()
        except BaseException as e:
            with self._cond:
                self._count -= 1
                self._cond.notify()
            if isinstance(e, Exception):
                now = time.monotonic()
                if now - self._last_start_warning > 60.0:  # every call fails: say so, but not per call
                    self._last_start_warning = now
                    logger.warning("could not start a bounded worker process (calls return 'error'): %r", e)
                return None
            raise
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
        self._kill(worker)  # shut down while in use

    def _discard(self, worker: _Worker) -> None:
        self._kill(worker)
        with self._cond:
            self._forget_locked(worker)

    def shutdown(self) -> None:
        with self._cond:
            workers = list(self._all)
            for w in workers:
                self._forget_locked(w)
            self._idle.clear()
        for w in workers:
            self._kill(w)

    def warmup(self, n: int) -> int:
        started = []
        for _ in range(max(0, min(n, self.max_workers))):
            w = self._checkout()
            if w is not None:
                started.append(w)
        for w in started:
            self._release(w)
        return len(started)

    # -- calls --

    def _run(self, worker: _Worker, payload: bytes, timeout: float) -> Bounded:
        conn = worker.conn
        try:
            conn.send_bytes(payload)
        except OSError:
            raise _Retry from None
        try:
            if not conn.poll(self.startup_timeout):
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

    def call(self, fn: Callable[..., Any], args: tuple, timeout: float, default: Any) -> Bounded:
        try:
            timeout = float(timeout)
        except (TypeError, ValueError):
            timeout = math.nan
        if not (timeout > 0 and math.isfinite(timeout)):
            logger.warning("call_bounded: timeout must be a positive finite number, got %r", timeout)
            return Bounded(default, Status.ERROR)
        timeout = min(timeout, _MAX_TIMEOUT)
        try:
            payload = pickle.dumps((fn, args), pickle.HIGHEST_PROTOCOL)
        except Exception as e:
            logger.warning("call_bounded: cannot pickle %r: %r", fn, e)
            return Bounded(default, Status.ERROR)
        for attempt in range(2):
            worker = self._checkout()
            if worker is None:
                return Bounded(default, Status.ERROR)
            healthy = False
            try:
                result = self._run(worker, payload, timeout)
                healthy = result.status is not Status.TIMEOUT
            except _Retry:
                if attempt == 0:
                    continue
                logger.debug("call_bounded: worker died before accepting %r", fn)
                return Bounded(default, Status.ERROR)
            except Exception as e:  # worker died while running the job, bad reply, ...
                logger.debug("call_bounded: %r failed in the worker: %r", fn, e)
                return Bounded(default, Status.ERROR)
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
        return Bounded(default, Status.ERROR)  # unreachable


_pool_lock = threading.Lock()
_pool: _Pool | None = None
_settings: dict[str, Any] = {}


def _env_workers() -> int:
    try:
        return int(os.environ.get("RG_VERL_BOUNDED_WORKERS", _DEFAULT_MAX_WORKERS))
    except ValueError:
        return _DEFAULT_MAX_WORKERS


def _get_pool() -> _Pool:
    global _pool
    pool = _pool
    if pool is None:
        with _pool_lock:
            if _pool is None:
                _pool = _Pool(
                    max_workers=_settings.get("max_workers") or _env_workers(),
                    preload=_settings.get("preload", PRELOAD),
                    memory_headroom=_settings.get("memory_headroom_bytes", _MEMORY_HEADROOM),
                    start_method=_settings.get("start_method") or _start_method(),
                    startup_timeout=_settings.get("startup_timeout", _STARTUP_TIMEOUT),
                )
            pool = _pool
    return pool


def configure(
    *,
    max_workers: int | None = None,
    preload: Iterable[str] | None = None,
    memory_headroom_bytes: int | None = _MEMORY_HEADROOM,
    start_method: str | None = None,
    startup_timeout: float = _STARTUP_TIMEOUT,
) -> None:
    """Replaces the process pool settings (existing workers are shut down).

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


def call_bounded(fn: Callable[..., Any], /, *args: Any, timeout: float, default: Any = None) -> Bounded:
    """Runs ``fn(*args)`` in a worker process, killing it after ``timeout`` seconds.

    Returns:
        ``(value, status)``: ``(fn(*args), "ok")``, or ``(default, "timeout")`` if it
        ran longer than ``timeout`` (the worker is killed and replaced), or
        ``(default, "error")`` if ``fn`` raised, the worker died, or ``fn``/``args``/the
        result could not be pickled. Never raises (except KeyboardInterrupt).
    """
    try:
        return _get_pool().call(fn, args, timeout, default)
    except Exception as e:  # defensive: never raise into the caller
        logger.warning("call_bounded: unexpected failure: %r", e)
        return Bounded(default, Status.ERROR)


def map_bounded(
    fn: Callable[[Any], Any],
    items: Iterable[Any],
    timeout_per_item: float,
    default: Any = None,
) -> list[Bounded]:
    """``[call_bounded(fn, item, timeout=timeout_per_item, default=default) for item in items]``,
    run concurrently on the worker pool; each item has its own limit. Never raises."""
    items = list(items)
    if not items:
        return []
    try:
        n = min(len(items), _get_pool().max_workers)
    except Exception:
        n = 1
    if n <= 1:
        return [call_bounded(fn, item, timeout=timeout_per_item, default=default) for item in items]

    def one(item: Any) -> Bounded:
        return call_bounded(fn, item, timeout=timeout_per_item, default=default)

    try:
        with ThreadPoolExecutor(max_workers=n, thread_name_prefix="rg-verl-bounded") as ex:
            return list(ex.map(one, items))
    except Exception as e:  # e.g. cannot start threads
        logger.warning("map_bounded: falling back to sequential calls: %r", e)
        return [one(item) for item in items]


def warmup(n: int | None = None) -> int:
    """Starts up to ``n`` (default all) worker processes now; returns how many are ready."""
    try:
        pool = _get_pool()
        return pool.warmup(pool.max_workers if n is None else n)
    except Exception as e:
        logger.warning("bounded warmup failed: %r", e)
        return 0


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
