"""A shipped experiment config trained on the CPU, unchanged but for overrides that shrink it (slow).

One run serves every check (each Ray run costs the suite a minute or more): ``curriculum/knights_knaves_curriculum``
is an experiment config like the others (the 3B GRPO settings, a reference-format reward term, the evaluator's
validation sampling), and it also moves reasoning-gym's own curriculum. The other shipped configs are composed and
draw their items in ``tests/unit/test_shipped_configs.py``; the GSM8K configs train in ``test_math_e2e.py``.
"""

import pytest

from tests.helpers import CONFIGS_DIR, train_on_cpu
from tests.unit.test_shipped_configs import composed, mix

pytestmark = pytest.mark.slow

CONFIG = CONFIGS_DIR / "curriculum" / "knights_knaves_curriculum.yaml"


@pytest.fixture(scope="module")
def curriculum_run(tmp_path_factory) -> dict[int, dict]:
    """Two steps with a one-step schedule: step -> metrics."""
    return train_on_cpu(tmp_path_factory.mktemp("curriculum"), str(CONFIG.parent), CONFIG.stem, 2,
                        "reasoning_gym.curriculum.schedule_every=1")  # fmt: skip


def test_experiment_config_trains_on_cpu_with_the_tiny_model(curriculum_run):
    for step in (1, 2):
        assert curriculum_run[step].get("training/global_step") == step, sorted(curriculum_run[step])[:20]
        assert "critic/advantages/mean" in curriculum_run[step]
    # the rewards came from the config's own datasets
    trained = {key.split("/")[2] for key in curriculum_run[1] if key.startswith("train/reasoning_gym/")}
    assert trained and trained <= set(mix(composed(CONFIG), "datasets")) | {"category"}


def test_curriculum_config_moves_the_level_on_cpu(curriculum_run):
    """With a one-step schedule, reasoning-gym's knights_knaves curriculum raises the level each step."""
    assert curriculum_run[1]["curriculum/knights_knaves/level"] == 1.0
    assert curriculum_run[2]["curriculum/knights_knaves/level"] == 2.0
