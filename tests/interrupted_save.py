"""Test-only verl plugin: the actor's checkpoint save of one step stops half-way, as if the process died in it.

tests/e2e/test_faults.py loads it into every Ray process (as tests/failing_rollout.py is loaded). It
wraps verl's ``FSDPCheckpointManager.save_checkpoint``: at step ``RG_VERL_STOP_AT_SAVE`` the actor's shards are
written, then the worker creates the file ``RG_VERL_SAVE_MARKER`` and waits, so the step's ``data.pt`` and the
tracker are never written. The test stops the run (a signal) once the marker is there.
"""

import os
import time
from pathlib import Path

import rg_verl.cpu.platform  # noqa: F401  (first: the checkpoint manager resolves verl's platform when imported)

# isort: split
from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager

_save = FSDPCheckpointManager.save_checkpoint


def _stopping_save(self, local_path, hdfs_path=None, global_step=0, max_ckpt_to_keep=None):
    _save(self, local_path, hdfs_path, global_step, max_ckpt_to_keep)
    if str(global_step) == os.environ.get("RG_VERL_STOP_AT_SAVE"):
        Path(os.environ["RG_VERL_SAVE_MARKER"]).touch()
        time.sleep(3600)  # killed by the test long before


FSDPCheckpointManager.save_checkpoint = _stopping_save
