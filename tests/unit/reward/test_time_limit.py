"""Tests for rg_verl.reward.time_limit: hard time limits in worker processes."""

import asyncio
import functools
import itertools
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
from rg_verl.reward.time_limit import Bounded, Status, call_bounded, map_bounded, within_size
from tests.helpers import REPO

MARGIN = 3.0  # generous: the limit is a behavioural bound, not a benchmark


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


def _state(pid: int) -> str | None:
    """The /proc state letter of ``pid``, None if it no longer exists."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None


def _gone(pid: int, within: float = 5.0, zombie_ok: bool = False) -> bool:
    """Whether ``pid`` exits (and is reaped, unless ``zombie_ok``) within ``within`` s."""
    dead = (None, "Z", "X") if zombie_ok else (None,)
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if _state(pid) in dead:
            return True
        time.sleep(0.05)
    return False


def bounded_call(fn, *args, timeout, default=None, limit=None):
    """``call_bounded`` on a helper thread: a hang fails the test instead of stalling it."""
    limit = timeout + MARGIN if limit is None else limit
    out = []
    t = threading.Thread(target=lambda: out.append(call_bounded(fn, *args, timeout=timeout, default=default)))
    t0 = time.monotonic()
    t.daemon = True
    t.start()
    t.join(limit)
    assert not t.is_alive(), f"call_bounded({fn.__name__}) still running after {limit} s"
    assert time.monotonic() - t0 < limit
    return out[0]


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
    value, status = bounded_call(time.sleep, 60, timeout=0.5, default="dflt")
    assert (value, status) == ("dflt", Status.TIMEOUT)
    assert call_bounded(operator.mul, 6, 7, timeout=10) == (42, "ok")


@pytest.mark.parametrize("fn", [spin_forever, python_loop_forever])
def test_uninterruptible_loops_time_out(fn):
    assert bounded_call(fn, timeout=0.5, default=0.0) == (0.0, "timeout")
    assert call_bounded(operator.neg, 5, timeout=10) == (-5, "ok")


def test_huge_integer_power_times_out():
    # 9 ** 387420489 in C: holds the GIL, ignores signals and cancellation.
    assert bounded_call(pow, 9, 9**9, timeout=0.5).status is Status.TIMEOUT
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
    assert bounded_call(time.sleep, 60, timeout=0.3).status == "timeout"
    assert _gone(first), f"timed-out worker {first} not reaped (state {_state(first)})"
    second, status = call_bounded(worker_pid, timeout=30)
    assert status == "ok" and second != first


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

    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=8) as ex:
        results = list(ex.map(job, range(40)))
    for i, (value, status) in results:
        if i % 10 == 3:
            assert (value, status) == ("late", "timeout")
        else:  # a timeout elsewhere never fails or retries an innocent call
            assert (value, status) == (i * 3, "ok")
    assert time.monotonic() - t0 < 30


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


def test_map_bounded_keeps_order_and_limits_each_item():
    t0 = time.monotonic()
    results = map_bounded(time.sleep, [0, 60, 0, 0], timeout_per_item=0.5, default="late")
    assert [r.status for r in results] == ["ok", "timeout", "ok", "ok"]
    assert results[1].value == "late"
    assert time.monotonic() - t0 < 0.5 + MARGIN
    assert map_bounded(abs, [-1, 2, -3], timeout_per_item=10) == [(1, "ok"), (2, "ok"), (3, "ok")]
    assert map_bounded(abs, [], timeout_per_item=10) == []
    assert map_bounded(operator.neg, ["x", 1], timeout_per_item=10, default=0) == [(0, "error"), (-1, "ok")]


def test_warmup_and_shutdown():
    assert bounded.warmup(1) == 1
    bounded.shutdown()
    assert call_bounded(operator.add, 1, 2, timeout=30) == (3, "ok")


def test_within_size():
    assert within_size("x" * bounded.MAX_ANSWER_CHARS)
    assert not within_size("x" * (bounded.MAX_ANSWER_CHARS + 1))
    assert not within_size(None)
    assert within_size("abc", max_chars=3) and not within_size("abcd", max_chars=3)


def test_status_is_a_string():
    assert Status.TIMEOUT == "timeout" and str(Status.ERROR) == "error"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_worker_dies_with_its_parent():
    script = textwrap.dedent(
        """
        import os, time
        from rg_verl.reward import time_limit as bounded
        bounded.configure(max_workers=1, preload=())
        print(bounded.call_bounded(os.getpid, timeout=60).value, flush=True)
        bounded.call_bounded(time.sleep, 600, timeout=600)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.strip().isdigit(), f"unexpected output {line!r}"
        worker = int(line)
        time.sleep(0.3)  # let the worker start the long job
        assert _state(worker) not in (None, "Z")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
    assert _gone(worker, within=10.0, zombie_ok=True), f"orphaned worker {worker} survived its parent"
