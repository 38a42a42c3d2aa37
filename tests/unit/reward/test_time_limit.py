"""Tests for rg_verl.reward.time_limit: hard time limits in worker processes.

A call that could hang runs under ``tests.helpers.within``: a generous deadline against hangs, which
includes any cold start of the workers; the limit itself is checked by the status a call returns.
"""

import asyncio
import ctypes
import functools
import itertools
import multiprocessing
import operator
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor

import pytest

from rg_verl.reward import time_limit as bounded
from rg_verl.reward.time_limit import Bounded, Status, call_bounded
from tests.helpers import REPO, within

# a call that has not returned after this long has hung (a worker may take up to a minute to start)
HANG_S = 120


# Module-level so they pickle by reference; the worker imports this module for them.
def spin_forever() -> None:
    deque(itertools.count(), maxlen=0)  # a C loop: no Python bytecode to interrupt


def python_loop_forever() -> None:
    while True:
        pass


class Boom(Exception):
    pass


def raise_boom(x):
    raise Boom(x)


def unpicklable_result():
    return threading.Lock()


def worker_pid() -> int:
    return os.getpid()


def pid_then_sleep(path: str, seconds: float) -> int:
    with open(path, "w") as f:
        f.write(str(os.getpid()))
    time.sleep(seconds)
    return os.getpid()


def imported(name: str) -> bool:
    return name in sys.modules


def parent_death_signal() -> int:
    found = ctypes.c_int(0)
    ctypes.CDLL(None).prctl(2, ctypes.byref(found), 0, 0, 0)  # PR_GET_PDEATHSIG
    return found.value


def sigterm_is_default() -> bool:
    return signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def process_state(pid: int) -> str | None:
    """The /proc state letter of ``pid``, None if it no longer exists."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None


def gone(pid: int, limit_s: float = 10.0, zombie_ok: bool = False) -> bool:
    """Whether ``pid`` exits (and is reaped, unless ``zombie_ok``) within ``limit_s`` seconds."""
    dead = (None, "Z", "X") if zombie_ok else (None,)
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if process_state(pid) in dead:
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def one_worker():
    bounded.configure(max_workers=1)
    try:
        yield
    finally:
        bounded.configure()


def test_returns_values():
    assert call_bounded(operator.add, 2, 3, timeout=10) == (5, "ok")
    value, status = call_bounded(sorted, [3, 1, 2], timeout=10)
    assert value == [1, 2, 3] and status is Status.OK
    r = call_bounded(functools.partial(pow, 2), 10, timeout=10, default=-1)
    assert isinstance(r, Bounded) and r.value == 1024 and r.status == "ok"


def test_sleep_times_out_and_next_call_works():
    value, status = within(HANG_S, call_bounded, time.sleep, 60, timeout=0.5, default="dflt")
    assert (value, status) == ("dflt", Status.TIMEOUT)
    assert call_bounded(operator.mul, 6, 7, timeout=10) == (42, "ok")


@pytest.mark.parametrize("fn", [spin_forever, python_loop_forever])
def test_uninterruptible_loops_time_out(fn):
    assert within(HANG_S, call_bounded, fn, timeout=0.5, default=0.0) == (0.0, "timeout")
    assert call_bounded(operator.neg, 5, timeout=10) == (-5, "ok")


def test_huge_integer_power_times_out():
    # 9 ** 387420489 in C: holds the GIL, ignores signals and cancellation.
    assert within(HANG_S, call_bounded, pow, 9, 9**9, timeout=0.5).status is Status.TIMEOUT
    assert call_bounded(abs, -3, timeout=10) == (3, "ok")


def test_errors_return_default():
    assert call_bounded(operator.truediv, 1, 0, timeout=10, default=-1.0) == (-1.0, "error")
    assert call_bounded(raise_boom, "x", timeout=10, default=None) == (None, "error")
    assert call_bounded(lambda: 1, timeout=10, default=7) == (7, "error")  # not picklable
    assert call_bounded(unpicklable_result, timeout=10, default=7) == (7, "error")
    assert call_bounded(operator.add, 1, 1, timeout=0, default=7) == (7, "error")
    assert call_bounded(operator.add, 1, 1, timeout=float("nan"), default=7) == (7, "error")
    assert call_bounded(operator.add, 1, 1, timeout=10) == (2, "ok")


def test_worker_death_is_an_error_and_is_replaced():
    assert call_bounded(os._exit, 3, timeout=10, default="d") == ("d", "error")
    assert call_bounded(operator.add, "a", "b", timeout=10) == ("ab", "ok")


def test_killed_worker_is_reaped_and_replaced(one_worker):
    first, status = call_bounded(worker_pid, timeout=30)
    assert status == "ok" and first != os.getpid()
    assert call_bounded(worker_pid, timeout=10).value == first  # reused while healthy
    assert within(HANG_S, call_bounded, time.sleep, 60, timeout=0.3).status == "timeout"
    assert gone(first), f"timed-out worker {first} not reaped (state {process_state(first)})"
    second, status = call_bounded(worker_pid, timeout=30)
    assert status == "ok" and second != first


def test_only_the_overrunning_calls_worker_dies(tmp_path):
    bounded.configure(max_workers=2)
    try:
        call_bounded(worker_pid, timeout=60)  # the workers are up
        path = tmp_path / "pid"
        with ThreadPoolExecutor(2) as pool:
            innocent = pool.submit(call_bounded, pid_then_sleep, str(tmp_path / "other"), 3.0, timeout=60)
            late = pool.submit(within, HANG_S, call_bounded, pid_then_sleep, str(path), 600.0, timeout=1.0)
            assert late.result().status == "timeout"
            survivor, status = innocent.result()
        assert status == "ok" and survivor != os.getpid()
        killed = int(path.read_text())
        assert gone(killed), f"the worker that overran ({killed}) lives on"
        assert process_state(survivor) not in (None, "Z"), "the other call's worker was killed too"
    finally:
        bounded.configure()


def test_workers_import_their_preload_before_any_call():
    bounded.configure(max_workers=1, preload=("tabnanny",))  # a module nothing here imports
    try:
        assert call_bounded(imported, "tabnanny", timeout=60) == (True, "ok")
    finally:
        bounded.configure()
    assert call_bounded(imported, "tabnanny", timeout=60) == (False, "ok")
    for name in bounded.PRELOAD:
        assert call_bounded(imported, name, timeout=60) == (True, "ok")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux-only")
def test_workers_are_killed_by_sigterm_at_once_and_by_their_parents_death():
    # pebble stops an overrunning worker with SIGTERM: its own handler would wait for the next bytecode
    assert call_bounded(sigterm_is_default, timeout=60) == (True, "ok")
    assert call_bounded(parent_death_signal, timeout=60) == (signal.SIGKILL, "ok")


def test_memory_limit_turns_runaway_allocation_into_an_error():
    bounded.configure(max_workers=1, memory_headroom_bytes=256 << 20)
    try:
        assert call_bounded(bytearray, 1 << 30, timeout=30, default=b"") == (b"", "error")
        assert call_bounded(len, bytearray(1 << 20), timeout=30) == (1 << 20, "ok")
    finally:
        bounded.configure()


def test_eight_threads_with_timeouts_mixed_in():
    def job(i):
        if i % 10 == 3:
            return i, call_bounded(time.sleep, 60, timeout=0.3, default="late")
        return i, call_bounded(operator.mul, i, 3, timeout=10, default=None)

    def run_all():
        with ThreadPoolExecutor(max_workers=8) as ex:
            return list(ex.map(job, range(40)))

    for i, (value, status) in within(HANG_S, run_all):
        if i % 10 == 3:
            assert (value, status) == ("late", "timeout")
        else:  # a timeout elsewhere never fails or retries an innocent call
            assert (value, status) == (i * 3, "ok")


def test_from_asyncio_executor_and_loop_thread():
    async def main():
        loop = asyncio.get_running_loop()
        calls = [
            loop.run_in_executor(None, functools.partial(call_bounded, operator.add, i, 1, timeout=10))
            for i in range(6)
        ]
        calls.append(loop.run_in_executor(None, functools.partial(call_bounded, time.sleep, 60, timeout=0.3)))
        results = await asyncio.gather(*calls)
        direct = call_bounded(operator.sub, 5, 2, timeout=10)  # on the loop thread itself
        return results, direct

    results, direct = asyncio.run(main())
    assert [tuple(r) for r in results[:6]] == [(i + 1, "ok") for i in range(6)]
    assert results[6].status == "timeout"
    assert direct == (3, "ok")


def test_shutdown_kills_the_workers_and_the_next_call_starts_new_ones(one_worker):
    first, status = call_bounded(worker_pid, timeout=30)
    assert status == "ok"
    bounded.shutdown()
    assert gone(first, zombie_ok=True), f"worker {first} survived shutdown (state {process_state(first)})"
    second, status = call_bounded(worker_pid, timeout=30)
    assert status == "ok" and second != first


def test_configure_replaces_the_pool():
    first, _ = call_bounded(worker_pid, timeout=30)
    bounded.configure(max_workers=1, preload=())
    try:
        assert gone(first, zombie_ok=True), "configure() shuts the old workers down"
        assert call_bounded(operator.add, 1, 2, timeout=30) == (3, "ok")
    finally:
        bounded.configure()


def test_status_is_a_string():
    assert Status.TIMEOUT == "timeout" and str(Status.ERROR) == "error"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_worker_dies_with_its_parent():
    # the first call comes from a thread that ends: its worker outlives that thread, not the process
    script = textwrap.dedent(
        """
        import os, threading
        from rg_verl.reward import time_limit as bounded
        from tests.unit.reward.test_time_limit import spin_forever
        bounded.configure(max_workers=1, preload=())
        first = []
        thread = threading.Thread(target=lambda: first.append(bounded.call_bounded(os.getpid, timeout=60).value))
        thread.start()
        thread.join()
        assert bounded.call_bounded(os.getpid, timeout=60).value == first[0]
        print(first[0], flush=True)
        bounded.call_bounded(spin_forever, timeout=600)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.strip().isdigit(), f"unexpected output {line!r}"
        worker = int(line)
        assert process_state(worker) not in (None, "Z")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
    assert gone(worker, limit_s=30.0, zombie_ok=True), f"orphaned worker {worker} survived its parent"


def call_in_a_daemonic_process(conn) -> None:
    conn.send((call_bounded(operator.add, 1, 2, timeout=60), call_bounded(time.sleep, 60, timeout=0.3)))


def test_a_daemonic_process_starts_workers_and_exits():
    context = multiprocessing.get_context("fork")
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=call_in_a_daemonic_process, args=(sender,), daemon=True)
    process.start()
    try:
        assert receiver.poll(HANG_S), "no answer from the daemonic process"
        assert receiver.recv() == ((3, "ok"), (None, "timeout"))
        process.join(HANG_S)  # it stops its workers as it exits: multiprocessing would wait for them
        assert process.exitcode == 0
    finally:
        if process.is_alive():
            process.kill()
