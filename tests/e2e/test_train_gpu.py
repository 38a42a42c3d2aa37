"""The smoke pipeline on a CUDA device: verl's normal CUDA platform, our hf rollout."""

import pytest

from tests.e2e.test_smoke_run import train
from tests.helpers import read_metrics

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


def test_smoke_run_on_cuda_with_hf_rollout(tmp_path):
    proc = train(
        tmp_path,
        tmp_path / "model",
        tmp_path / "metrics.jsonl",
        "trainer.device=cuda",
        "actor_rollout_ref.rollout.name=hf",
        "actor_rollout_ref.model.override_config.attn_implementation=sdpa",
        "trainer.total_training_steps=2",
        "trainer.save_freq=2",
        "trainer.test_freq=2",
    )
    metrics = read_metrics(tmp_path / "metrics.jsonl")
    assert {1, 2} <= set(metrics)
    assert "train/reasoning_gym/chain_sum/score" in metrics[2]
    assert metrics[2]["training/rollout_probs_diff_max"] < 1e-2
    assert (tmp_path / "ckpt" / "global_step_2" / "actor" / "huggingface").is_dir()
    assert "rg_verl.cpu.platform" not in proc.stdout
