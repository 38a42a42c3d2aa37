"""GRPO through verl's own vLLM rollout on the CPU: the real engine, weight sync, validation, a checkpoint, a resume;
a run whose engine dies and a run that gets Ctrl-C both stop in seconds, and the next run resumes; the "wrong, try
again" agent loop on it (LoRA adapters synced to it: tests/vllm/test_lora_vllm.py).

verl starts vLLM with dummy weights (``rollout.load_format: dummy``) and syncs the actor's weights into it before
every rollout, so the rollout's log-probs agree with the actor's only when the sync works. The start is the learn
config's warm-started tiny model (head size 64): its next-token distributions are sharp (entropy well below the
uniform ln(1024) = 6.9), so a dummy-weighted engine (almost uniform) could not agree with it by chance.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time

import psutil
import pytest

from tests.helpers import plugin_env, read_metrics, session_processes, stop_session, wait_for_text
from tests.vllm.conftest import SegmentWatch
from tests.vllm.runs import check_agreement, start, train

pytestmark = pytest.mark.slow

MAX_TURNS = 2
PREFIX = "train/reasoning_gym/chain_sum/"
RETRY = ["actor_rollout_ref.rollout.agent.default_agent_loop=rg_verl_retry", f"retry.max_turns={MAX_TURNS}"]
# how long a run may take to reach its fault (an engine start on a loaded machine takes minutes), and to stop after
# it: twice the 30 s goal, so that a hang fails and a loaded machine does not (docs/testing.md, "A run that stops",
# has the times measured)
REACH_S = 900
STOP_S = 60


def engine_cores(run) -> list[psutil.Process]:
    """The run's vLLM engine core processes."""
    found = []
    for pid in session_processes(run.pid):
        try:
            process = psutil.Process(pid)
            if "VLLM::EngineCore" in " ".join(process.cmdline()):
                found.append(process)
        except psutil.Error:
            continue
    return found


def stopped_run(workdir, name: str, ready, fault, env=None) -> tuple[str, int | None, float, list[int]]:
    """A 3-step run, started in the background, that gets ``fault(run)`` once ``ready(run, log)`` holds: its output,
    exit code (None: still running, hung), the seconds from the fault to its exit, and the processes of its session
    still there after it."""
    run = start(workdir, 3, name, *RETRY, env=env)
    log = workdir / f"{name}.log"
    try:
        assert ready(run, log), log.read_text()[-4000:]
        fault(run)
        faulted = time.monotonic()
        try:
            code = run.wait(timeout=STOP_S)
        except subprocess.TimeoutExpired:
            code = None
        seconds = time.monotonic() - faulted
        return log.read_text(), code, seconds, session_processes(run.pid)
    finally:
        stop_session(run)


def step_2_logged(run, log) -> bool:
    return wait_for_text(run, log, "[rg-verl] step 2/3", REACH_S)


def saving_step_3(marker):
    """Ready once the run's save of step 3 has written the actor's shards and waits (tests/interrupted_save.py)."""

    def ready(run, log) -> bool:
        deadline = time.monotonic() + REACH_S
        while not marker.exists() and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        return marker.exists()

    return ready


def kill_the_engine(run) -> None:
    [engine] = engine_cores(run)
    engine.kill()


def interrupt(run) -> None:
    os.kill(run.pid, signal.SIGINT)  # what Ctrl-C sends the driver


@pytest.fixture(scope="module")
def full_runs(tmp_path_factory):
    """One command run three times in one folder, retry episodes on, validation and a checkpoint at steps 2 and 3:

    1. ``killed``: its vLLM engine core is SIGKILLed once step 2 is logged (step 2 saved), in step 3;
    2. ``interrupted``: resumes from step 2 and gets SIGINT while it saves step 3 (the save waits half-way:
       tests/interrupted_save.py);
    3. ``resumed``: resumes from step 2 and trains step 3 to the end.
    """
    workdir = tmp_path_factory.mktemp("grpo_vllm")
    marker = workdir / "saving"
    stop_in_save = {**plugin_env("interrupted_save"), "RG_VERL_STOP_AT_SAVE": "3", "RG_VERL_SAVE_MARKER": str(marker)}
    with SegmentWatch() as shm:
        killed = stopped_run(workdir, "killed", step_2_logged, kill_the_engine)
        interrupted = stopped_run(workdir, "interrupted", saving_step_3(marker), interrupt, env=stop_in_save)
        resumed = train(workdir, 3, workdir / "resumed.jsonl", *RETRY)
    runs = ("killed", "interrupted", "resumed")
    logged = {run: read_metrics(path) if (path := workdir / f"{run}.jsonl").exists() else {} for run in runs}
    return logged, killed, interrupted, resumed.stdout + resumed.stderr, workdir, shm.left


def test_vllm_rollout_trains_with_its_weights_synced(full_runs):
    logged, killed, *_ = full_runs
    steps = {**logged["killed"], **logged["resumed"]}
    assert sorted(steps) == [1, 2, 3]
    assert "IPC is not supported" in killed[0]  # verl syncs the weights through shared memory on the CPU
    for metrics in steps.values():
        check_agreement(metrics)
        assert metrics["timing_s/update_weights"] > 0
    assert "val-core/reasoning_gym/chain_sum/reward/mean@1" in steps[2]  # validation ran on vLLM too


def test_a_dead_engine_stops_the_run_naming_it_and_the_way_to_resume(full_runs):
    _, (output, code, seconds, left), *_, workdir, _ = full_runs
    assert code == 1, output[-4000:]
    assert seconds < STOP_S and not left  # and every process of the run is gone
    [line] = [line for line in output.splitlines() if line.startswith("[rg-verl] the run stopped: ")]
    assert line.startswith(
        "[rg-verl] the run stopped: the vLLM engine of rollout replica 0 (Ray actor 'vllm_server_0_0') died: "
        "EngineDeadError (EngineCore"
    ) and "killed by SIGKILL" in line  # fmt: skip
    assert f"the last complete checkpoint is step 2 in {workdir / 'ckpt'}" in line
    assert "; resume with: python " in line and "train_grpo.py --config-name learn" in line


def test_ctrl_c_stops_the_run_and_reports_the_save_it_interrupted(full_runs):
    _, _, (output, code, seconds, left), _, workdir, _ = full_runs
    assert code == 130, output[-4000:]
    assert seconds < STOP_S and not left
    assert "resuming from the checkpoint of step 2" in output
    [line] = [line for line in output.splitlines() if line.startswith("[rg-verl] the run stopped: ")]
    ckpt = workdir / "ckpt"
    assert line.startswith(
        f"[rg-verl] the run stopped: interrupted by SIGINT; the last complete checkpoint is step 2 in {ckpt}"
        " (global_step_3: an interrupted save, which the rerun reports and passes over); resume with: python"
    )  # fmt: skip


def test_the_runs_resume_exactly_each_step_logged_once(full_runs):
    logged, _, _, resumed, workdir, _ = full_runs
    assert re.search(r"resuming from the checkpoint of step 2", resumed)
    assert f"{workdir / 'ckpt' / 'global_step_3'} is an interrupted save" in resumed
    assert [sorted(steps) for steps in logged.values()] == [[1, 2], [], [3]]
    for step in (2, 3):  # step 2's, then the resumed run's last step's
        assert (workdir / "ckpt" / f"global_step_{step}" / "actor" / "huggingface").is_dir()
    assert (workdir / "ckpt" / "latest_checkpointed_iteration.txt").read_text().strip() == "3"
    curve = json.loads((workdir / "ckpt" / "reward_curve.json").read_text())
    steps = {**logged["killed"], **logged["resumed"]}
    assert curve == {str(s): pytest.approx(steps[s]["critic/score/mean"]) for s in (1, 2, 3)}


def test_retry_episodes_run_on_the_vllm_rollout(full_runs):
    logged, *_ = full_runs
    steps = {**logged["killed"], **logged["resumed"]}
    for metrics in steps.values():
        solved = [metrics[f"{PREFIX}solved_by_turn_{j}"] for j in range(1, MAX_TURNS + 1)]
        assert solved == sorted(solved) and solved[-1] == pytest.approx(metrics[f"{PREFIX}accuracy"])
        assert 1.0 <= metrics[f"{PREFIX}turns"] <= MAX_TURNS
        # verl counts the prompt, each answer and each feedback turn: 2 per try
        assert 2 <= metrics["training/num_turns/min"] <= metrics["training/num_turns/max"] <= 2 * MAX_TURNS
    assert max(m["training/num_turns/max"] for m in steps.values()) >= 4  # a wrong answer was retried
    # validation runs the same episodes and logs them per dataset
    for j in range(1, MAX_TURNS + 1):
        assert f"val-aux/reasoning_gym/chain_sum/solved_by_turn_{j}/mean@1" in steps[2]
    assert "val-aux/reasoning_gym/chain_sum/turns/mean@1" in steps[2]


def test_a_vllm_run_leaves_nothing_in_shared_memory(full_runs):
    *_, left = full_runs
    assert not left, f"left in /dev/shm: {sorted(left)}"
