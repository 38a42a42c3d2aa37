"""rg_verl.grpo.shm: a run's own leftover shared-memory segments are removed, and nothing anyone else uses."""

from __future__ import annotations

import mmap
import os
import signal
import subprocess
import sys
import time

from rg_verl.grpo import shm


def make(folder, *names: str) -> None:
    for name in names:
        (folder / name).write_bytes(b"\0" * mmap.PAGESIZE)


def test_only_the_runs_segments_that_nobody_uses_are_removed(tmp_path):
    make(tmp_path, "psm_from_before")
    before = shm.snapshot(tmp_path)
    make(tmp_path, "psm_left", "verl_weights_left", "sem.loky-1-x", "psm_open", "psm_mapped", "psm_elsewhere",
         "someone_elses")  # fmt: skip
    held = open(tmp_path / "psm_open", "rb")  # noqa: SIM115  (held open while the run ends)
    with open(tmp_path / "psm_mapped", "r+b") as f:
        mapped = mmap.mmap(f.fileno(), mmap.PAGESIZE)  # mapped, its file descriptor closed
    # another program's segment, created during the run by a process outside this one's tree (its parent, a
    # shell, has exited): never the run's
    line = f"{sys.executable} -c 'import sys, time; f = open(sys.argv[1]); time.sleep(60)' {tmp_path}/psm_elsewhere"
    other = int(subprocess.run(["sh", "-c", f"{line} >/dev/null 2>&1 & echo $!"], capture_output=True,
                               text=True, check=True).stdout)  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while "psm_elsewhere" not in shm.used_by([other], tmp_path) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert {"psm_open", "psm_mapped"} <= shm.used_by([os.getpid()], tmp_path)
        assert "psm_elsewhere" in shm.in_use(tmp_path)
        assert shm.owned(before, tmp_path) == {"psm_open", "psm_mapped"}  # what this process (the run) uses
        ours = {"psm_left", "verl_weights_left", "psm_open", "psm_mapped"}
        removed = shm.remove_leftovers(ours, shm=tmp_path, grace_s=0)
        assert sorted(removed) == ["psm_left", "verl_weights_left"]
        assert sorted(os.listdir(tmp_path)) == [
            "psm_elsewhere", "psm_from_before", "psm_mapped", "psm_open", "sem.loky-1-x", "someone_elses"
        ]  # fmt: skip
    finally:
        held.close()
        mapped.close()
        os.kill(other, signal.SIGKILL)
    assert shm.remove_leftovers(ours, shm=tmp_path, grace_s=0) == ["psm_mapped", "psm_open"]  # once let go
    assert "psm_elsewhere" in os.listdir(tmp_path)  # not the run's: kept, though nobody uses it now


def test_no_shared_memory_folder_is_no_error(tmp_path):
    assert shm.snapshot(tmp_path / "missing") == set()
    assert shm.owned(set(), tmp_path / "missing") == set()
    assert shm.remove_leftovers({"psm_x"}, shm=tmp_path / "missing", grace_s=0) == []


def test_a_run_context_removes_what_its_finished_processes_left(tmp_path):
    """A segment a child used during the run, and a semaphore it made (named after its pid), the child gone (killed)
    by the end: removed; a segment created during the run that no process of the run ever used, and a semaphore of
    another process: kept."""
    hold = ("import os, sys, time; f = open(sys.argv[1], 'w'); f.write('x'); f.flush(); "
            "open(f'{sys.argv[2]}/sem.loky-{os.getpid()}-child', 'w').write('x'); time.sleep(2)")  # fmt: skip
    with shm.RunSegments(tmp_path, every_s=0.05, grace_s=0) as run:
        child = subprocess.Popen([sys.executable, "-c", hold, str(tmp_path / "psm_child"), str(tmp_path)])
        make(tmp_path, "psm_nobodys", "sem.loky-1-init")
        child.wait(timeout=30)  # it exits without unlinking, as a killed actor does
        assert {"psm_child", f"sem.loky-{child.pid}-child"} <= run.seen
    assert sorted(os.listdir(tmp_path)) == ["psm_nobodys", "sem.loky-1-init"]


def test_a_segment_made_since_the_last_look_goes_when_the_run_looks_before_killing_its_maker(tmp_path):
    # verl's weight bucket of a sync that a dead engine left hanging: made between two of the watch's looks, mapped
    # by a process of the run that the stop then kills
    holder = ("import mmap, sys, time\nf = open(sys.argv[1], 'w+b'); f.write(b'0' * mmap.PAGESIZE); f.flush()\n"
              "m = mmap.mmap(f.fileno(), mmap.PAGESIZE)\nprint('ready', flush=True)\ntime.sleep(60)")  # fmt: skip
    for look_first in (True, False):
        with shm.RunSegments(tmp_path, every_s=3600, grace_s=0) as segments:  # no look of its own before the end
            child = subprocess.Popen([sys.executable, "-c", holder, str(tmp_path / "verl_weights_bucket")],
                                     stdout=subprocess.PIPE, text=True)  # fmt: skip
            assert child.stdout.readline().strip() == "ready"
            if look_first:
                segments.look()
            child.kill()
            child.wait()
        left = (tmp_path / "verl_weights_bucket").exists()
        assert left is not look_first  # without the look, nothing of the run holds it at the end: left for good
        (tmp_path / "verl_weights_bucket").unlink(missing_ok=True)
