"""LoRA adapters synced to verl's vLLM rollout on the CPU: two GRPO steps of the learn config with a rank-8 adapter,
the rollout's log-probs agreeing with the actor's (tests/vllm/runs.py) at both. At step 1 the adapter is still zero;
at step 2 the rollout must serve the adapter step 1 trained. It runs on the worker of tests/vllm/test_grpo_vllm.py,
after that module's runs (tests/conftest.py's ``SAME_WORKER``: two verl runs with the vLLM rollout at once would
share one weight-sync socket's name).
"""

from __future__ import annotations

import json
import math

import pytest

from tests.helpers import read_metrics
from tests.vllm.conftest import SegmentWatch
from tests.vllm.runs import check_agreement, train

pytestmark = pytest.mark.slow


def test_lora_adapters_are_synced_to_vllm(tmp_path):
    lora = ["actor_rollout_ref.model.lora_rank=8", "actor_rollout_ref.model.lora_alpha=16",
            "actor_rollout_ref.actor.optim.lr=1e-2", "trainer.test_freq=-1"]  # fmt: skip
    with SegmentWatch() as shm:
        train(tmp_path, 2, tmp_path / "metrics.jsonl", *lora)
    steps = read_metrics(tmp_path / "metrics.jsonl")
    assert sorted(steps) == [1, 2]
    for metrics in steps.values():
        check_agreement(metrics)
    meta = json.loads((tmp_path / "ckpt" / "global_step_2" / "actor" / "lora_train_meta.json").read_text())
    assert meta["r"] == 8
    assert not math.isnan(steps[2]["actor/pg_loss"])
    assert not shm.left, f"left in /dev/shm: {sorted(shm.left)}"
