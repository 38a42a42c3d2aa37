"""Why the reward's time limit keeps its own worker pool instead of pebble's ``ProcessPool`` (docs/reward.md, "The
time limit's own pool, not pebble's"): which of its guarantees pebble keeps, and the one it cannot.

pebble's ``schedule(fn, timeout=)`` kills only the worker that overran, and its initializer can preload modules, set
the parent-death signal and the memory limit. It cannot start its workers in a daemonic process (a
``multiprocessing.Pool`` or data-loader worker), where ``call_bounded`` can and the reward must score. Should a
later pebble start them there, the last test fails and says so.
"""

from __future__ import annotations

import multiprocessing
import os
import resource
import time
from concurrent.futures import TimeoutError as FutureTimeout

import pytest
from pebble import ProcessPool

from rg_verl.reward.time_limit import call_bounded
from tests.helpers import within

HANG_S = 120


def worker_pid() -> int:
    return os.getpid()


def sleep_then_pid(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def limit_memory(headroom: int) -> None:
    """pebble's initializer: the address-space limit call_bounded's workers get."""
    with open("/proc/self/statm") as f:
        size = int(f.read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (size + headroom, size + headroom))


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def test_pebble_kills_only_the_worker_that_overran():
    def run():
        with ProcessPool(max_workers=2, context=multiprocessing.get_context("forkserver")) as pool:
            late = pool.schedule(sleep_then_pid, args=(60,), timeout=0.5)
            innocent = pool.schedule(sleep_then_pid, args=(2,), timeout=30)
            with pytest.raises(FutureTimeout):
                late.result()
            survivor = innocent.result()  # the other worker finished its call after the kill
            assert alive(survivor)
            return survivor

    assert within(HANG_S, run) != os.getpid()


def test_pebble_workers_take_a_memory_limit_from_the_initializer():
    with ProcessPool(max_workers=1, initializer=limit_memory, initargs=(256 << 20,)) as pool:
        with pytest.raises(MemoryError):
            pool.schedule(bytearray, args=(1 << 30,), timeout=30).result()
        assert pool.schedule(len, args=(bytearray(1 << 20),), timeout=30).result() == 1 << 20


def pebble_and_call_bounded_in_this_process() -> tuple[bool, str, object]:
    """(whether this process is daemonic, what pebble's pool gave, what call_bounded gave)."""
    try:
        with ProcessPool(max_workers=1) as pool:
            pebble = repr(pool.schedule(worker_pid, timeout=30).result())
    except AssertionError as error:  # multiprocessing's refusal
        pebble = f"refused: {error}"
    return multiprocessing.current_process().daemon, pebble, tuple(call_bounded(worker_pid, timeout=60))


def test_pebble_cannot_start_workers_in_a_daemonic_process_and_call_bounded_can():
    with multiprocessing.get_context("fork").Pool(1) as pool:
        daemonic, pebble, bounded = within(HANG_S, pool.apply, pebble_and_call_bounded_in_this_process)
    assert daemonic
    assert pebble == "refused: daemonic processes are not allowed to have children", (
        f"pebble now starts workers in a daemonic process ({pebble}): docs/reward.md's reason to keep our pool is gone"
    )
    assert bounded[1] == "ok" and isinstance(bounded[0], int)
