"""rg_verl.grpo.trainer: the step and validation hooks add our metrics (verl's parent methods stubbed)."""

import pytest

V = "val-core/reasoning_gym"
T = "train/reasoning_gym"


@pytest.fixture
def trainer(monkeypatch):
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    from rg_verl.grpo.trainer import ReasoningGymTrainer

    val = {f"{V}/chain_sum/reward/mean@1": 1.0, f"{V}/products/reward/mean@1": 0.0, "val-aux/num_turns/min": 2}
    monkeypatch.setattr(PPOTrainerSync, "_validate", lambda self: dict(val))
    monkeypatch.setattr(PPOTrainerSync, "step", lambda self, metrics, timing_raw: "batch")
    sources = ["reasoning_gym/chain_sum", "reasoning_gym/maze", "reasoning_gym/maze"]
    infos = [{"score": 1.0}, {"score": 1.0}, {"score": 0.0}]
    monkeypatch.setattr(ReasoningGymTrainer, "read_rewards", lambda self, batch: (sources, infos))
    trainer = ReasoningGymTrainer.__new__(ReasoningGymTrainer)  # no verl setup needed for these methods
    trainer.train_dataset = None  # not a reasoning-gym dataset: no curriculum
    return trainer


def test_trainer_validate_adds_category_means(trainer):
    assert trainer._validate() == {
        f"{V}/chain_sum/reward/mean@1": 1.0,
        f"{V}/products/reward/mean@1": 0.0,
        "val-aux/num_turns/min": 2,
        f"{V}/category/arithmetic/reward/mean@1": 0.5,
    }


def test_trainer_step_adds_category_means(trainer):
    metrics = {"timing_s/gen": 1.0}
    assert trainer.step(metrics, {}) == "batch"
    assert metrics == {
        "timing_s/gen": 1.0,
        f"{T}/chain_sum/score": 1.0,
        f"{T}/maze/score": 0.5,
        f"{T}/category/arithmetic/score": 1.0,
        f"{T}/category/games/score": 0.5,
    }
