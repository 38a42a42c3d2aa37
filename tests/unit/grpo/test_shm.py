"""rg_verl.grpo.shm: a run's leftover shared-memory segments are removed, and nothing another process uses."""

from __future__ import annotations

import mmap
import os

from rg_verl.grpo import shm


def test_only_the_runs_unused_segments_are_removed(tmp_path):
    before = {"psm_from_before"}
    for name in ("psm_from_before", "psm_left", "verl_weights_left", "sem.loky-1-x", "psm_open", "psm_mapped",
                 "someone_elses"):  # fmt: skip
        (tmp_path / name).write_bytes(b"\0" * mmap.PAGESIZE)
    held = open(tmp_path / "psm_open", "rb")  # noqa: SIM115  (held open while the run ends)
    with open(tmp_path / "psm_mapped", "r+b") as f:
        mapped = mmap.mmap(f.fileno(), mmap.PAGESIZE)  # mapped, its file descriptor closed
    try:
        assert {"psm_open", "psm_mapped"} <= shm.in_use(tmp_path)
        removed = shm.remove_leftovers(before, shm=tmp_path, grace_s=0)
        assert sorted(removed) == ["psm_left", "sem.loky-1-x", "verl_weights_left"]
        assert sorted(os.listdir(tmp_path)) == ["psm_from_before", "psm_mapped", "psm_open", "someone_elses"]
    finally:
        held.close()
        mapped.close()
    assert shm.remove_leftovers(before, shm=tmp_path, grace_s=0) == ["psm_mapped", "psm_open"]  # once let go


def test_no_shared_memory_folder_is_no_error(tmp_path):
    assert shm.snapshot(tmp_path / "missing") == set()
    assert shm.remove_leftovers(set(), shm=tmp_path / "missing", grace_s=0) == []
