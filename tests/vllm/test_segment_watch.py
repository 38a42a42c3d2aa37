"""The tier's /dev/shm check counts what this session's processes leave, not what another program makes."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from tests.vllm.conftest import OWNER, SHM, SegmentWatch

MAKE = "import os, sys, time; open(f'{sys.argv[1]}/sem.loky-{os.getpid()}-{sys.argv[2]}', 'w'); time.sleep(6)"


def test_a_semaphore_another_program_made_is_not_counted_and_one_of_ours_is():
    stranger = {name: value for name, value in os.environ.items() if name != OWNER}
    with SegmentWatch(every_s=0.5, grace_s=1) as shm:
        theirs = subprocess.Popen([sys.executable, "-c", MAKE, str(SHM), "theirs"], env=stranger)
        ours = subprocess.Popen([sys.executable, "-c", MAKE, str(SHM), "ours"])
        time.sleep(3)  # both made theirs and are still running: the watch has looked at them
    try:
        assert shm.left == {f"sem.loky-{ours.pid}-ours"}
    finally:
        for process in (theirs, ours):
            process.kill()
            process.wait()
            (SHM / f"sem.loky-{process.pid}-{'theirs' if process is theirs else 'ours'}").unlink(missing_ok=True)
