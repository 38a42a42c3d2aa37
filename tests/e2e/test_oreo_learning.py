"""OREO learns on a CPU: trained on trajectories of the warm-started tiny model, the value model predicts
the reward of held-out trajectories and the policy earns more of it on held-out items; with the rewards
permuted across trajectories neither happens, and with the rewards flipped the policy earns less.

The trajectories are collected by ``utils/collect_trajectories.py`` from ``configs/smoke/learn.yaml`` (64
training items and 32 validation items, 8 samples each; the warm start writes the strict format in about a
fifth of its samples), then ``train_oreo.py --config-name learn_cpu`` trains for two epochs. The held-out
items are sampled again with the converted actor under the collection's own seeds, so the before/after
difference is paired. The reward is the one GRPO's learning check trains with (strict format + strict
correctness, ``score``); the controls change only the config (``oreo.reward``).

Thresholds (``tests/oreo_calibrate.py``, 9 seeds, each a fresh collection and training): see the constants.
"""

from __future__ import annotations

import pytest

from tests.oreo_helpers import CONDITIONS, LEARN_ITEMS, LEARN_VAL_ITEMS, collect, learning_run

pytestmark = pytest.mark.slow

# the value model's AUC at the last state, on held-out trajectories, must reach 0.5 + this (calibrated below)
MIN_AUC_MARGIN = 0.2
# the trained policy's held-out mean reward must beat the warm start's by this much
MIN_GAIN = 0.1
# with permuted rewards the AUC must stay within 0.5 +- this, and the policy must not gain more than this
MAX_PERMUTED_AUC_OFFSET = 0.15
MAX_PERMUTED_GAIN = 0.05
# with flipped rewards the policy must lose at least this much
MIN_FLIPPED_LOSS = 0.05


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, dict[str, float]]:
    root = tmp_path_factory.mktemp("oreo_learning")
    model = root / "model"
    trajectories = collect(root, root / "trajectories", model, "--train-items", str(LEARN_ITEMS),
                           "--val-items", str(LEARN_VAL_ITEMS), "--seed", "42")  # fmt: skip
    results = {condition: learning_run(root / condition, model, trajectories, condition, seed=1)
               for condition in CONDITIONS}  # fmt: skip
    for condition, result in results.items():
        print(condition, {k: round(v, 3) for k, v in result.items()})
    return results


def gain(result: dict[str, float]) -> float:
    return result["reward_after"] - result["reward_before"]


def test_value_model_predicts_success_on_held_out_trajectories(runs):
    assert runs["oreo"]["auc_last"] >= 0.5 + MIN_AUC_MARGIN, runs["oreo"]


def test_policy_earns_more_reward_on_held_out_items(runs):
    assert gain(runs["oreo"]) >= MIN_GAIN, runs["oreo"]


def test_permuted_rewards_teach_nothing(runs):
    permuted = runs["permuted"]
    assert abs(permuted["auc_last"] - 0.5) <= MAX_PERMUTED_AUC_OFFSET, permuted
    assert gain(permuted) <= MAX_PERMUTED_GAIN, permuted


def test_flipped_rewards_make_the_policy_worse(runs):
    assert gain(runs["flipped"]) <= -MIN_FLIPPED_LOSS, runs["flipped"]
