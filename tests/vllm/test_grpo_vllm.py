"""GRPO through verl's own vLLM rollout on the CPU: the real engine, weight sync, validation, a checkpoint, a resume;
the "wrong, try again" agent loop on it (LoRA adapters synced to it: tests/vllm/test_lora_vllm.py).

verl starts vLLM with dummy weights (``rollout.load_format: dummy``) and syncs the actor's weights into it before
every rollout, so the rollout's log-probs agree with the actor's only when the sync works. The start is the learn
config's warm-started tiny model (head size 64): its next-token distributions are sharp (entropy well below the
uniform ln(1024) = 6.9), so a dummy-weighted engine (almost uniform) could not agree with it by chance.
"""

from __future__ import annotations

import re

import pytest

from tests.helpers import read_metrics
from tests.vllm.conftest import SegmentWatch
from tests.vllm.runs import check_agreement, train

pytestmark = pytest.mark.slow

MAX_TURNS = 2
PREFIX = "train/reasoning_gym/chain_sum/"


@pytest.fixture(scope="module")
def full_runs(tmp_path_factory):
    """Two steps with retry episodes (validation and a checkpoint at step 2), then a resume for a third."""
    workdir = tmp_path_factory.mktemp("grpo_vllm")
    retry = ["actor_rollout_ref.rollout.agent.default_agent_loop=rg_verl_retry", f"retry.max_turns={MAX_TURNS}"]
    with SegmentWatch() as shm:
        first = train(workdir, 2, workdir / "first.jsonl", *retry)
        resumed = train(workdir, 3, workdir / "second.jsonl", *retry)
    steps = {**read_metrics(workdir / "first.jsonl"), **read_metrics(workdir / "second.jsonl")}
    return steps, first.stdout + first.stderr, resumed.stdout + resumed.stderr, workdir, shm.left


def test_vllm_rollout_trains_with_its_weights_synced(full_runs):
    steps, first, *_ = full_runs
    assert sorted(steps) == [1, 2, 3]
    assert "IPC is not supported" in first  # verl syncs the weights through shared memory on the CPU
    for metrics in steps.values():
        check_agreement(metrics)
        assert metrics["timing_s/update_weights"] > 0
    assert "val-core/reasoning_gym/chain_sum/reward/mean@1" in steps[2]  # validation ran on vLLM too


def test_a_vllm_run_checkpoints_and_resumes(full_runs):
    steps, _, resumed, workdir, _ = full_runs
    assert re.search(r"resuming from the checkpoint of step 2", resumed)
    for step in (2, 3):  # step 2's, then the resumed run's last step's
        assert (workdir / "ckpt" / f"global_step_{step}" / "actor" / "huggingface").is_dir()
    assert (workdir / "ckpt" / "latest_checkpointed_iteration.txt").read_text().strip() == "3"


def test_retry_episodes_run_on_the_vllm_rollout(full_runs):
    steps, *_ = full_runs
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
