"""Faults on the CPU smoke config, survived with nothing lost: one chain of three runs in one output folder (each
Ray run costs the suite a minute or more).

- **Run A**: a rollout request fails in step 1 (tests/failing_rollout.py: its group is replaced, never trained
  short, rg_verl/grpo/sampler.py), and the save of step 3 stops half-way (tests/interrupted_save.py), when the test
  sends the driver SIGTERM (what a scheduler sends; Ctrl-C's SIGINT is tests/vllm/test_grpo_vllm.py's): the run
  stops within seconds, every process of it gone, naming the save it interrupted (rg_verl/grpo/stopping.py).
- **Run B** runs the same command again (``trainer.resume_mode=auto``, the default): it reports the interrupted
  save and resumes from step 2 (rg_verl/grpo/resume.py), trains step 3, and in the middle of step 4 its rollout
  server's process is SIGKILLed, as the out-of-memory killer would. The run stops, naming the dead server
  (rg_verl/grpo/workers.py, rg_verl/grpo/watchdog.py).
- **Run C** runs it again from step 3's checkpoint. Every response of its step 4 is hostile (a sympy power tower in
  an answer tag to each integration question, tag soups to the others, tests/failing_rollout.py): the step scores
  them 0, cuts off the tower's scorer and counts it in ``scoring_failed``, and step 5 runs normally.

The chain is then checked against what a run that never broke holds: each step logged once, the reward curve,
the dataloader's position (the data order) and the adaptive weights' record of outcomes, step by step.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from rg_verl.grpo.resume import TRACKER, missing_parts
from rg_verl.grpo.reward_curve import REWARD_KEY
from tests.helpers import REPO, plugin_env, read_metrics, session_processes, stop_session

pytestmark = pytest.mark.slow

EVICTED = "training/rollout_failure/evicted_samples"
STEPS = 5
PROMPTS, RESPONSES = 4, 2  # the smoke config's data.train_batch_size and rollout.n
# a run that reaches its fault later than this has hung; one still running this long after SIGINT or its rollout
# server's death has hung too (twice the 30 s goal: docs/testing.md, "A run that stops", has the times measured)
FAULT_DEADLINE_S = 600
STOP_DEADLINE_S = 60
# the server's requests: step 3 is the first 8 of run B, so its 12th is in the middle of step 4
KILL_AT_REQUEST = PROMPTS * RESPONSES + PROMPTS


@pytest.fixture(scope="module")
def chain(tmp_path_factory) -> Path:
    """The folder of the chain's runs: the model, the checkpoints in ``out``, each run's log and metrics."""
    return tmp_path_factory.mktemp("faults")


def launch(workdir: Path, run: str, *extra: str, **env: str) -> subprocess.Popen:
    """``train_grpo.py`` on the smoke config, in a process group of its own; output in ``<run>.log``."""
    overrides = [f"trainer.default_local_dir={workdir / 'out'}", "trainer.logger=[console,file]",
                 f"trainer.total_training_steps={STEPS}", "trainer.save_freq=1", "trainer.test_freq=-1",
                 "reasoning_gym.adaptive_weights.enabled=true", *extra,
                 # a dataset whose scorer parses with sympy, in place of leg_counting: run C's hostile step
                 "~reasoning_gym.datasets.leg_counting",
                 "+reasoning_gym.datasets.intermediate_integration.weight=1"]  # fmt: skip
    environ = {**os.environ, **plugin_env("failing_rollout", "interrupted_save"),
               "RG_VERL_TINY_MODEL": str(workdir / "model"), "VERL_FILE_LOGGER_PATH": str(workdir / f"{run}.jsonl"),
               "RG_VERL_FAIL_ROLLOUTS": str(workdir / "failed_once"), **env}  # fmt: skip
    with open(workdir / f"{run}.log", "w") as log:
        return subprocess.Popen([sys.executable, str(REPO / "train_grpo.py"), *overrides], cwd=workdir, env=environ,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip


def wait_for(run: subprocess.Popen, marker: Path, deadline_s: float) -> None:
    deadline = time.monotonic() + deadline_s
    while not marker.exists() and run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)


def kill_group(run: subprocess.Popen) -> None:
    """SIGKILL every process of the run's session (a test that failed leaves nothing running)."""
    stop_session(run)


def finish(run: subprocess.Popen, timeout_s: float) -> int:
    """The run's exit code; -1 for a run still going after ``timeout_s`` (it has hung; the test then fails)."""
    try:
        return run.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return -1


@pytest.fixture(scope="module")
def run_a(chain) -> tuple[str, int, list[int]]:
    """Run A's output, its exit code and the processes of its session still there after it: SIGTERM in its save of
    step 3."""
    marker = chain / "saving"
    run = launch(chain, "a", RG_VERL_STOP_AT_SAVE="3", RG_VERL_SAVE_MARKER=str(marker))
    try:
        wait_for(run, marker, FAULT_DEADLINE_S)
        assert marker.exists(), (chain / "a.log").read_text()[-4000:]
        os.kill(run.pid, signal.SIGTERM)
        returncode = finish(run, STOP_DEADLINE_S)
        left = session_processes(run.pid)
    finally:
        kill_group(run)
    return (chain / "a.log").read_text(), returncode, left


@pytest.fixture(scope="module")
def run_b(chain, run_a) -> tuple[str, int, int]:
    """Run B's output, its exit code and the pid of the rollout server that was killed in its step 4."""
    marker = chain / "server_killed"
    # on the quiet console, where a stopped run prints its line after the step lines
    run = launch(chain, "b", "trainer.console=progress", RG_VERL_KILL_ROLLOUT_AT=f"{KILL_AT_REQUEST}:{marker}")
    try:
        wait_for(run, marker, FAULT_DEADLINE_S)
        assert marker.exists(), (chain / "b.log").read_text()[-4000:]
        returncode = finish(run, STOP_DEADLINE_S)
    finally:
        kill_group(run)
    return (chain / "b.log").read_text(), returncode, int(marker.read_text())


@pytest.fixture(scope="module")
def run_c(chain, run_b) -> tuple[str, int]:
    """Run C's output and exit code: its step 4 all hostile responses, its step 5 the model's."""
    run = launch(chain, "c", RG_VERL_HOSTILE_ROLLOUTS=str(PROMPTS * RESPONSES))
    try:
        returncode = finish(run, FAULT_DEADLINE_S)
    finally:
        kill_group(run)
    return (chain / "c.log").read_text(), returncode


def test_a_group_with_a_failed_rollout_is_replaced_and_every_step_trains_full_groups(chain, run_a):
    output, _, _ = run_a
    assert (chain / "failed_once").exists()  # one request did fail
    assert "test rollout failure" in output
    metrics = read_metrics(chain / "a.jsonl")
    assert sorted(metrics) == [1, 2]  # step 3 was trained, then stopped in its save before verl logged it
    # verl evicted the failed request's group (its other response too) and a fresh prompt replaced it; the
    # buffer checked every trained group for its rollout.n responses, or the run would have stopped
    assert sum(step.get(EVICTED, 0) for step in metrics.values()) == 1
    for step in metrics.values():
        assert step["train/reasoning_gym/chain_sum/groups/all_correct"] >= 0  # the step's groups were read back


def test_sigterm_in_a_save_stops_the_run_naming_the_interrupted_save_and_the_last_complete_checkpoint(chain, run_a):
    output, returncode, left = run_a
    assert returncode == 143, output[-4000:]  # stopped by itself, within STOP_DEADLINE_S of the signal
    assert not left  # Ray's processes are gone with it
    out = chain / "out"
    [line] = [line for line in output.splitlines() if line.startswith("[rg-verl] the run stopped: ")]
    assert line.startswith(
        f"[rg-verl] the run stopped: interrupted by SIGTERM; the last complete checkpoint is step 2 in {out} "
        "(global_step_3: an interrupted save, which the rerun reports and passes over); resume with: "
        f"python {REPO / 'train_grpo.py'} "
    )  # fmt: skip


def test_a_run_stopped_while_saving_leaves_the_last_complete_checkpoint_tracked(chain, run_a):
    out = chain / "out"
    assert (out / TRACKER).read_text().strip() == "2"
    assert missing_parts(out / "global_step_2") == []
    assert missing_parts(out / "global_step_3") == ["data.pt"]  # the actor's shards without the rest


def test_the_resumed_run_reports_the_interrupted_save_and_resumes_from_the_last_complete_one(chain, run_b):
    output, _, _ = run_b
    assert f"{chain / 'out' / 'global_step_3'} is an interrupted save" in output
    assert sorted(read_metrics(chain / "b.jsonl")) == [3]  # resumed at step 3; step 4 never finished


def test_a_dead_rollout_server_stops_the_run_naming_it(chain, run_b):
    output, returncode, pid = run_b
    assert returncode == 1, output[-4000:]  # stopped by itself, within STOP_DEADLINE_S of the kill
    [line] = [line for line in output.splitlines() if line.startswith("[rg-verl] the run stopped: ")]
    # found by the replay buffer at the first failed request, or by the driver's watch: the same words
    server = f"the Ray actor HFRolloutServer 'rg_verl_hf_server_0' (pid {pid},"
    assert line.startswith(f"[rg-verl] the run stopped: {server}")
    assert f"; the last complete checkpoint is step 3 in {chain / 'out'}; resume with: " in line
    assert "more than max_refill_batches" not in output  # stopped at the first failed group, not by the bound
    # the quiet console: the log's path first, the step lines, the stop line; no traceback
    [log] = (chain / "out" / "logs").glob("train-*.log")
    assert f"[rg-verl] verl's and Ray's logs: {log}" in output and "Traceback" not in output


def test_the_chain_holds_what_a_run_that_never_broke_holds(chain, run_a, run_b, run_c):
    output, returncode = run_c
    assert returncode == 0, output[-4000:]
    out = chain / "out"
    assert (out / TRACKER).read_text().strip() == str(STEPS)
    logged = {**read_metrics(chain / "a.jsonl"), **read_metrics(chain / "b.jsonl"), **read_metrics(chain / "c.jsonl")}
    runs = [sorted(read_metrics(chain / f"{run}.jsonl")) for run in "abc"]
    assert runs == [[1, 2], [3], [4, 5]]  # each step logged once, by the run that saved it
    # the reward curve: each step once, the value of the run that completed it (not run A's lost step 3)
    curve = read_reward_curve(out)
    assert curve == {step: pytest.approx(logged[step][REWARD_KEY]) for step in range(1, STEPS + 1)}
    states = {step: torch.load(out / f"global_step_{step}" / "data.pt", weights_only=False) for step in (2, 3, 4, 5)}
    for step, state in states.items():
        # the data order: the sampler moved on by one batch a step (and the one prompt that replaced step 1's
        # failed group), with the same random generator: no batch drawn twice, none skipped
        assert state["_sampler_iter_state"]["samples_yielded"] == PROMPTS * step + 1
        assert torch.equal(state["_sampler_iter_state"]["sampler_iter_state"]["generator"],
                           states[2]["_sampler_iter_state"]["sampler_iter_state"]["generator"])  # fmt: skip
        # the adaptive weights' record: every step's outcomes once, each run continuing the last saved record
        record = state["dataset_state"]
        assert record["step"] == step
        assert sum(len(values) for values in record["results"].values()) == PROMPTS * RESPONSES * step
    for before, after in ((2, 3), (3, 4), (4, 5)):
        for name, values in states[before]["dataset_state"]["results"].items():
            assert states[after]["dataset_state"]["results"][name][: len(values)] == values


def read_reward_curve(out: Path) -> dict[int, float]:
    return {int(step): value for step, value in json.loads((out / "reward_curve.json").read_text()).items()}


def test_a_step_of_hostile_responses_scores_zero_counts_the_cut_off_scorers_and_the_next_step_is_normal(chain, run_c):
    output, returncode = run_c
    assert returncode == 0, output[-4000:]  # within FAULT_DEADLINE_S
    hostile, normal = (read_metrics(chain / "c.jsonl")[step] for step in (4, 5))
    train = "train/reasoning_gym"
    for name in ("chain_sum", "intermediate_integration"):
        assert hostile[f"{train}/{name}/accuracy"] == 0.0 and hostile[f"{train}/{name}/correct_lenient"] == 0.0
    # every tower reached sympy's parser and was cut off; no tag soup needed a cut-off
    assert hostile[f"{train}/intermediate_integration/scoring_failed"] == 1.0
    assert hostile[f"{train}/chain_sum/scoring_failed"] == 0.0
    # the model answered step 5 itself (its own lengths, not the hostile ones) and every scorer finished
    assert normal["response_length/mean"] != hostile["response_length/mean"]
    assert all(value == 0.0 for key, value in normal.items() if key.endswith("/scoring_failed")), normal
