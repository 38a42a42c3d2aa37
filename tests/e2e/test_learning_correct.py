"""GRPO teaches correct answers: a CPU run of configs/smoke/learn_correct.yaml raises held-out accuracy, and the
same run with every advantage negated does not.

The reward is correctness alone (reasoning-gym's letter_counting scorer on the lenient answer; no format or
length term), so what rises is the share of right answers. Held-out accuracy is validation's ``mean@4`` over
64 validation items, 4 samples each at temperature 1, before the first step and after the last.

What the tiny model learns here is mostly the task's answer prior: 57% of letter_counting's answers on 3 to 5
words are "1", and a trained run ends near that rate. That still takes the whole correctness path (our dataset,
the item's own scorer against its own answer, verl's GRPO update, the rollout serving the new weights): a run
that scores against nothing learns nothing, and the negated control, from the same model and seeds, loses
accuracy. The format check (tests/e2e/test_learning.py) covers the format path.

Thresholds: see the constants, calibrated with ``python -m tests.correct_calibrate N DIR`` (seed set s trains
with ``data.seed = 1 + s`` and rollout seed ``42 + s``; seed set 0 is this test's own run).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.test_learning import negated_env
from tests.helpers import read_metrics, run_train_grpo

pytestmark = pytest.mark.slow

STEPS = 16
HELD_OUT = "val-aux/reasoning_gym/letter_counting/accuracy/mean@4"
TRAIN = "train/reasoning_gym/letter_counting/accuracy"
# Measured over 9 seed sets (0-8), a GRPO and a negated run each, all from one warm-started model:
#   held-out accuracy before the first step  0.129 to 0.211 (either run)
#   GRPO after 16 steps                       0.484 to 0.570: gains +0.296 to +0.414 (mean +0.38)
#   negated GRPO after 16 steps               0.000 in all 9: no right answer left
# The same model's step-0 accuracy differs by up to 0.04 between the GRPO and the negated run of one seed set
# (validation samples at temperature 1, and the hf rollout batches requests as they arrive).
MIN_GAIN = 0.2
MAX_NEGATED_GAIN = 0.0


def held_out(metrics: dict[int, dict]) -> tuple[float, float]:
    """Held-out accuracy before the first step and after the last."""
    return float(metrics[0][HELD_OUT]), float(metrics[STEPS][HELD_OUT])


def train(workdir: Path, model: Path, *overrides: str, env: dict | None = None) -> dict[int, dict]:
    """train_grpo.py on the learn_correct config in ``workdir``; verl's logged metrics, step -> dict."""
    metrics = workdir / "metrics.jsonl"
    run_env = {"RG_VERL_LEARN_CORRECT_MODEL": str(model), "VERL_FILE_LOGGER_PATH": str(metrics), **(env or {})}
    run_train_grpo(
        workdir, "--config-name", "learn_correct", f"trainer.default_local_dir={workdir / 'out'}",
        "trainer.logger=[console,file]", *overrides, env=run_env,
    )  # fmt: skip
    return read_metrics(metrics)


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    # built (and warm-started) by the first run, reused by the second
    return tmp_path_factory.mktemp("learn_correct") / "model"


@pytest.fixture(scope="module")
def grpo_run(tmp_path_factory, model) -> dict[int, dict]:
    return train(tmp_path_factory.mktemp("correct_grpo"), model)


@pytest.fixture(scope="module")
def negated_run(tmp_path_factory, model, grpo_run) -> dict[int, dict]:
    workdir = tmp_path_factory.mktemp("correct_negated")
    return train(workdir, model, "algorithm.adv_estimator=negated_grpo", env=negated_env())


def test_grpo_raises_held_out_accuracy(grpo_run):
    before, after = held_out(grpo_run)
    print(f"held-out accuracy {before:.3f} -> {after:.3f}")
    # the warm start leaves room both ways
    assert 0.05 <= before <= 0.4
    assert after - before >= MIN_GAIN, (before, after)


def test_the_reward_is_correctness_alone(grpo_run):
    for step in range(1, STEPS + 1):
        metrics = grpo_run[step]
        # the scorer's own value (letter_counting gives partial credit to some wrong answers), nothing added
        score = metrics["train/reasoning_gym/letter_counting/score"]
        assert score == pytest.approx(metrics["train/reasoning_gym/letter_counting/correct_lenient"])
        assert not any("/term/" in key for key in metrics)


def test_negated_advantage_lowers_held_out_accuracy(grpo_run, negated_run):
    before, after = held_out(negated_run)
    print(f"negated: held-out accuracy {before:.3f} -> {after:.3f}")
    assert held_out(grpo_run)[0] == pytest.approx(before, abs=0.1)  # the same model, the same held-out items
    assert after - before <= MAX_NEGATED_GAIN, (before, after)
    assert after <= held_out(grpo_run)[1] - MIN_GAIN


def calibrate(root: Path, seed_sets: range) -> None:
    """The calibration behind the thresholds: a GRPO and a negated run for each seed set, one JSON line each."""
    for s in seed_sets:
        seeds = (f"data.seed={1 + s}", f"actor_rollout_ref.rollout.seed={42 + s}")
        for name, extra, env in (("grpo", (), None), ("negated", ("algorithm.adv_estimator=negated_grpo",),
                                                                 negated_env())):  # fmt: skip
            workdir = root / f"{name}{s}"
            workdir.mkdir(parents=True, exist_ok=True)
            before, after = held_out(train(workdir, root / "model", *seeds, *extra, env=env))
            print(f'{{"seed": {s}, "run": "{name}", "before": {before:.3f}, "after": {after:.3f}}}', flush=True)
