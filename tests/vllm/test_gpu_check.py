"""The vLLM tier's checks on a CUDA machine: what a GPU user runs, with verl's pinned vLLM and flash-attention.

Skipped without CUDA (``gpu``) and without vLLM (this folder). ``bench/gpu_check.sh`` runs them after the GPU
install of the README; each is the CPU tier's check with the device, the attention kernel and the memory share
of a GPU: the rollout/actor log-prob agreement after verl's weight sync (full weights and LoRA), validation, a
checkpoint, and greedy evaluation with repeats on vLLM.
"""

from __future__ import annotations

import json

import pytest

from rg_verl.evaluation.config import parse_config
from rg_verl.evaluation.runner import evaluate
from tests.helpers import read_metrics
from tests.vllm.runs import check_agreement, eval_config, train

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

# a GPU run: verl's CUDA platform, flash-attention with padding removed, vLLM's usual memory share
CUDA = [
    "trainer.device=cuda",
    "actor_rollout_ref.model.override_config.attn_implementation=flash_attention_2",
    "actor_rollout_ref.model.use_remove_padding=true",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.3",
]


def test_grpo_on_vllm_with_flash_attention(tmp_path):
    train(tmp_path, 2, tmp_path / "metrics.jsonl", *CUDA)
    steps = read_metrics(tmp_path / "metrics.jsonl")
    assert sorted(steps) == [1, 2]
    for metrics in steps.values():
        check_agreement(metrics)
    assert "val-core/reasoning_gym/chain_sum/reward/mean@1" in steps[2]
    assert (tmp_path / "ckpt" / "global_step_2" / "actor" / "huggingface").is_dir()


def test_lora_on_vllm_with_flash_attention(tmp_path):
    lora = ["actor_rollout_ref.model.lora_rank=8", "actor_rollout_ref.model.lora_alpha=16", "trainer.test_freq=-1"]
    train(tmp_path, 2, tmp_path / "metrics.jsonl", *CUDA, *lora)
    steps = read_metrics(tmp_path / "metrics.jsonl")
    for metrics in steps.values():
        check_agreement(metrics)
    assert (tmp_path / "ckpt" / "global_step_2" / "actor" / "lora_train_meta.json").is_file()


def test_greedy_evaluation_with_repeats_on_vllm(warm_model, tmp_path):
    config = parse_config(eval_config(warm_model, tmp_path, device="cuda", temperature=0.0, dtype="bfloat16",
                                      engine_kwargs={"gpu_memory_utilization": 0.3}))  # fmt: skip
    results = json.loads((evaluate(config) / "results.json").read_text())
    items = [i for c in results["categories"] for d in c["datasets"] for i in d["results"]]
    assert len(items) == 7
    for item in items:
        texts = [c["full_model_response"] for c in item["completions"]]
        assert len(texts) == 3 and len(set(texts)) == 1
