"""Shipped experiment configs trained on the CPU, unchanged but for overrides that shrink them (slow)."""

import pytest

from tests.helpers import CONFIGS_DIR, train_on_cpu
from tests.unit.test_shipped_configs import composed, mix

pytestmark = pytest.mark.slow


def test_experiment_config_trains_one_step_on_cpu_with_the_tiny_model(tmp_path):
    """inter_generalisation/algorithmic_qwen_3b, unchanged but for overrides that shrink it to a CPU."""
    step = train_on_cpu(tmp_path, "configs/inter_generalisation", "algorithmic_qwen_3b", 1)[1]
    assert step.get("training/global_step") == 1, sorted(step)[:20]
    assert "critic/advantages/mean" in step
    # the rewards came from the config's own datasets
    trained = {key.split("/")[2] for key in step if key.startswith("train/reasoning_gym/")}
    allowed = set(mix(composed(CONFIGS_DIR / "inter_generalisation" / "algorithmic_qwen_3b.yaml"), "datasets"))
    assert trained and trained <= allowed | {"category"}


def test_curriculum_config_moves_the_level_on_cpu(tmp_path):
    """curriculum/knights_knaves_curriculum on the tiny model: with a one-step schedule the level rises each step."""
    metrics = train_on_cpu(
        tmp_path, "configs/curriculum", "knights_knaves_curriculum", 2, "reasoning_gym.curriculum.schedule_every=1"
    )
    assert metrics[1]["curriculum/knights_knaves/level"] == 1.0
    assert metrics[2]["curriculum/knights_knaves/level"] == 2.0
