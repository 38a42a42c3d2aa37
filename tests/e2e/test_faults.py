"""Faults on the CPU smoke config: a failed rollout never trains a short group (rg_verl/grpo/sampler.py), and a run
killed while saving a checkpoint resumes from the last complete one (rg_verl/grpo/resume.py).

Two test-only verl plugins are loaded into every Ray process: an ``hf`` rollout server that fails on demand
(tests/failing_rollout.py), and an actor save that stops half-way at one step (tests/interrupted_save.py). One run
serves both faults, as each Ray run costs the suite a minute or more: a rollout request fails in step 1, and the
save of step 3 stops half-way, when the test kills the run's whole process group (driver and Ray processes, as a
lost job dies).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rg_verl.grpo.resume import TRACKER, missing_parts
from tests.helpers import REPO, plugin_env, read_metrics, run_train_grpo

pytestmark = pytest.mark.slow

EVICTED = "training/rollout_failure/evicted_samples"
# a run that reaches the save of step 3 later than this has hung
SAVE_DEADLINE_S = 600


def fault_env(mode: str, workdir: Path, model: Path) -> dict[str, str]:
    return {
        **plugin_env("failing_rollout"),
        "RG_VERL_FAIL_ROLLOUTS": mode,
        "RG_VERL_TINY_MODEL": str(model),
        "VERL_FILE_LOGGER_PATH": str(workdir / "metrics.jsonl"),
    }


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("faults") / "model"  # built by the first run


def overrides(workdir: Path, steps: int, save_freq: int = -1) -> list[str]:
    return [f"trainer.default_local_dir={workdir / 'out'}", "trainer.logger=[console,file]",
            f"trainer.total_training_steps={steps}", f"trainer.save_freq={save_freq}",
            "trainer.test_freq=-1"]  # fmt: skip


@pytest.fixture(scope="module")
def killed_run(tmp_path_factory, model) -> tuple[Path, str, int]:
    """(run folder, its output, its exit code): one rollout request fails, and the run is SIGKILLed in its
    checkpoint save of step 3."""
    workdir = tmp_path_factory.mktemp("killed")
    marker = workdir / "saving"
    env = {**os.environ, **fault_env(str(workdir / "failed_once"), workdir, model),
           **plugin_env("failing_rollout", "interrupted_save"), "RG_VERL_STOP_AT_SAVE": "3",
           "RG_VERL_SAVE_MARKER": str(marker)}  # fmt: skip
    with open(workdir / "run.log", "w") as log:
        run = subprocess.Popen([sys.executable, str(REPO / "train_grpo.py"), *overrides(workdir, 3, save_freq=1)],
                               cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + SAVE_DEADLINE_S
            while not marker.exists() and run.poll() is None and time.monotonic() < deadline:
                time.sleep(0.5)
        finally:
            os.killpg(run.pid, signal.SIGKILL)  # the driver and every Ray process it started
            run.wait(timeout=60)
    output = (workdir / "run.log").read_text()
    assert marker.exists(), output[-4000:]
    return workdir, output, run.returncode


def test_a_group_with_a_failed_rollout_is_replaced_and_every_step_trains_full_groups(killed_run):
    workdir, output, _ = killed_run
    assert (workdir / "failed_once").exists()  # one request did fail
    assert "test rollout failure" in output
    metrics = read_metrics(workdir / "metrics.jsonl")
    assert sorted(metrics) == [1, 2]  # step 3 was trained, then killed in its save before verl logged it
    # verl evicted the failed request's group (its other response too) and a fresh prompt replaced it; the
    # buffer checked every trained group for its rollout.n responses, or the run would have stopped
    assert sum(step.get(EVICTED, 0) for step in metrics.values()) == 1
    for step in metrics.values():
        assert step["train/reasoning_gym/chain_sum/groups/all_correct"] >= 0  # the step's groups were read back


def test_a_run_killed_while_saving_resumes_from_the_last_complete_checkpoint(killed_run, model):
    workdir, _, returncode = killed_run
    out = workdir / "out"
    assert returncode == -signal.SIGKILL
    # what the kill left: step 2 complete and tracked, step 3's actor shards without the rest
    assert (out / TRACKER).read_text().strip() == "2"
    assert missing_parts(out / "global_step_2") == []
    assert missing_parts(out / "global_step_3") == ["data.pt"]
    # the next run's checks (before Ray, as a resume runs them) resume from step 2 and report step 3
    proc = run_train_grpo(workdir, *overrides(workdir, 3, save_freq=1), "+dry_run=true",
                          env={"RG_VERL_TINY_MODEL": str(model)})  # fmt: skip
    output = proc.stdout + proc.stderr
    assert f"{out / 'global_step_3'} is an interrupted save" in output and "step 2" in output
    assert (out / "global_step_3" / "actor").is_dir()  # left for the user to delete


def test_rollouts_that_always_fail_stop_the_run_with_the_reason(tmp_path, model):
    workdir = tmp_path / "always"
    workdir.mkdir()
    proc = run_train_grpo(workdir, *overrides(workdir, 2), "trainer.v1.sampler.sampler_kwargs.max_refill_batches=1",
                          env=fault_env("always", workdir, model), check=False)  # fmt: skip
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "more than max_refill_batches x data.train_batch_size = 4: either rollouts keep failing" in output
    assert not (workdir / "metrics.jsonl").exists() or not read_metrics(workdir / "metrics.jsonl")
