"""A short curriculum run through train_grpo.py: the level moves, and a resumed run restores it."""

import pytest
import torch

from tests.e2e.test_train_e2e import train
from tests.helpers import read_metrics

pytestmark = pytest.mark.slow

# A random tiny model fails every item, so with a one-sample window every step lowers the level.
CURRICULUM = [
    "reasoning_gym.curriculum.enabled=true",
    "+reasoning_gym.curriculum.levels.chain_sum.num_terms=3",
    "+reasoning_gym.curriculum.levels.chain_sum.num_digits=3",
    "reasoning_gym.curriculum.last_k=1",
    "reasoning_gym.curriculum.min_samples=1",
    "reasoning_gym.adaptive_weights.enabled=true",
    "reasoning_gym.adaptive_weights.min_samples=1",
]


def saved_state(run_dir, step: int) -> dict:
    """The curriculum state verl's dataloader checkpoint holds for a step."""
    return torch.load(run_dir / "ckpt" / f"global_step_{step}" / "data.pt", weights_only=False)["dataset_state"]


def test_curriculum_acts_and_survives_resume(tmp_path):
    common = ["trainer.test_freq=-1", "trainer.save_freq=2", *CURRICULUM]
    train(tmp_path, tmp_path / "model", tmp_path / "first.jsonl", "trainer.total_training_steps=2", *common)
    first = read_metrics(tmp_path / "first.jsonl")
    assert first[1]["curriculum/chain_sum/level"] == 2.0
    assert first[2]["curriculum/chain_sum/level"] == 1.0
    assert "curriculum/leg_counting/weight" in first[2]
    saved = saved_state(tmp_path, 2)
    assert saved["step"] == 2 and saved["levels"]["chain_sum"] == {"num_terms": 1, "num_digits": 1}

    resume = ["trainer.total_training_steps=3", "trainer.resume_mode=auto"]
    train(tmp_path, tmp_path / "model", tmp_path / "resumed.jsonl", *resume, *common)
    resumed = read_metrics(tmp_path / "resumed.jsonl")
    assert min(resumed) == 3
    # a fresh state would be at step 1 and level 2; the restored one continues from the saved one
    assert resumed[3]["curriculum/chain_sum/level"] == 0.0
    after = saved_state(tmp_path, 3)
    assert after["step"] == 3 and after["levels"]["chain_sum"] == {"num_terms": 0, "num_digits": 0}
