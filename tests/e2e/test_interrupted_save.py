"""A run SIGKILLed while it saves a checkpoint: the next run resumes from the last complete one and reports the
half-written one (rg_verl/grpo/resume.py), on the CPU smoke config.

The actor's save of step 2 stops half-way (tests/interrupted_save.py, loaded into every Ray process); the test then
kills the run's whole process group, driver and Ray processes together, as a lost job would die."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from rg_verl.grpo.resume import TRACKER, missing_parts
from tests.helpers import REPO, plugin_env, run_train_grpo

pytestmark = pytest.mark.slow

# a run that reaches the save of step 2 later than this has hung
SAVE_DEADLINE_S = 600


def test_a_run_killed_while_saving_resumes_from_the_last_complete_checkpoint(tmp_path):
    ckpt, marker = tmp_path / "ckpt", tmp_path / "saving"
    args = [f"trainer.default_local_dir={ckpt}", "trainer.total_training_steps=2", "trainer.save_freq=1",
            "trainer.test_freq=-1"]  # fmt: skip
    env = {**os.environ, **plugin_env("interrupted_save"), "RG_VERL_TINY_MODEL": str(tmp_path / "model"),
           "RG_VERL_STOP_AT_SAVE": "2", "RG_VERL_SAVE_MARKER": str(marker)}  # fmt: skip
    with open(tmp_path / "run.log", "w") as log:
        run = subprocess.Popen([sys.executable, str(REPO / "train_grpo.py"), *args], cwd=tmp_path, env=env,
                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        try:
            deadline = time.monotonic() + SAVE_DEADLINE_S
            while not marker.exists() and run.poll() is None and time.monotonic() < deadline:
                time.sleep(0.5)
            assert marker.exists(), (tmp_path / "run.log").read_text()[-4000:]
        finally:
            os.killpg(run.pid, signal.SIGKILL)  # the driver and every Ray process it started
            run.wait(timeout=60)
    assert run.returncode == -signal.SIGKILL
    # what the kill left: step 1 complete and tracked, step 2's actor shards without the rest
    assert (ckpt / TRACKER).read_text().strip() == "1"
    assert missing_parts(ckpt / "global_step_1") == []
    assert missing_parts(ckpt / "global_step_2") == ["data.pt"]
    # the next run's checks (before Ray, as a resume runs them) resume from step 1 and report step 2
    proc = run_train_grpo(tmp_path, *args, "+dry_run=true", env={"RG_VERL_TINY_MODEL": str(tmp_path / "model")})
    output = proc.stdout + proc.stderr
    assert f"{ckpt / 'global_step_2'} is an interrupted save" in output and "step 1" in output
    assert (ckpt / "global_step_2" / "actor").is_dir()  # left for the user to delete
