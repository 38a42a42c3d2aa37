"""The GRPO loop learns: a CPU run of configs/smoke/learn.yaml raises its training reward, and the
same run with every advantage negated does not.

A green pipeline can still learn nothing: a reward with the wrong sign, the wrong group, a rollout
that misses the weight updates, a reward on the wrong token all give a flat curve. Here the
signal goes through everything a real run uses: ``train_grpo.py``, our dataset, our reward and
verl's GRPO update. The tiny model gets a short supervised warm start (rg_verl/cpu/tiny_model.py) after
which about a quarter of its samples have the strict think/answer format; the reward pays for
that format (see the config).

Both runs use the same fixed seeds and the same warm-started model. The negative control swaps in
``negated_grpo`` (tests/negated_grpo.py: minus verl's GRPO advantage), registered through verl's
public ``register_adv_est`` and loaded in every Ray process by ``VERL_USE_EXTERNAL_MODULES``: no
code changes, only the environment and ``algorithm.adv_estimator``.
"""

import importlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.helpers import REPO, plugin_env, read_metrics, run_train_grpo

# what the learning runs log per step: verl's mean reward, and our format indicator
REWARD = "critic/score/mean"
FORMAT_OK = "train/reasoning_gym/chain_sum/format_ok"
# the steps compared: the first WINDOW against the best WINDOW of the second half of STEPS
STEPS = 12
WINDOW = 3
# GRPO must raise the windowed mean reward by at least this much. Measured on 9 runs (5 seed
# sets; the test's own seeds 5 times): gains +0.33 to +0.55, mean 0.45, sd 0.07. The noise of one
# window difference, from the per-step scatter around the trend, is 0.08 to 0.13. The hf rollout
# batches requests as they arrive, so fixed seeds do not replay a run exactly: the margin must
# hold for any replay.
MIN_GAIN = 0.2
# the negated run must not gain at all (measured on 9 runs of 12 steps: it loses the format after one or two
# updates and scores 0 from then on; gains -0.03 to -0.10)
MAX_NEGATED_GAIN = 0.0
# the negated run's steps: its second half, steps 4 to 6, is one window. Measured over seed sets 0-3 (two side by
# side; docs/testing.md): steps 4-6 averaged 0.000-0.035, gains -0.109 to -0.142
NEGATED_STEPS = 6


def train(
    workdir: Path, model_dir: Path, *overrides: str, env: dict | None = None, steps: int = STEPS
) -> dict[int, dict]:
    """Run train_grpo.py on the learn config in ``workdir`` for ``steps`` steps; verl's logged metrics, step -> dict."""
    metrics = workdir / "metrics.jsonl"
    run_env = {"RG_VERL_LEARN_MODEL": str(model_dir), "VERL_FILE_LOGGER_PATH": str(metrics), **(env or {})}
    run_train_grpo(
        workdir,
        "--config-name",
        "learn",
        f"trainer.default_local_dir={workdir / 'out'}",
        "trainer.logger=[console,file]",
        f"trainer.total_training_steps={steps}",
        *overrides,
        env=run_env,
    )
    return read_metrics(metrics)


def negated_env() -> dict[str, str]:
    """The environment that loads tests/negated_grpo.py in the driver and every Ray worker."""
    return plugin_env("negated_grpo")


def curve(metrics: dict[int, dict], key: str = REWARD, steps: int = STEPS) -> list[float]:
    assert sorted(metrics) == list(range(1, steps + 1)), f"logged steps {sorted(metrics)}"
    return [float(metrics[step][key]) for step in range(1, steps + 1)]


def late_peak(values: list[float]) -> float:
    """The best mean of WINDOW consecutive steps in the second half of the run."""
    start = len(values) // 2
    return float(max(np.mean(values[i : i + WINDOW]) for i in range(start, len(values) - WINDOW + 1)))


def gain(values: list[float]) -> float:
    """:func:`late_peak` minus the mean of the first WINDOW steps.

    The best late window, not the last one: the test asks whether the loop learns, not whether GRPO at
    this learning rate stays stable on a tiny model. One run rose from 0.31 to 0.77 by step 9 and fell
    back to 0.34 at step 12; its last window gained only +0.10, its best late window +0.30.
    """
    return late_peak(values) - float(np.mean(values[:WINDOW]))


@pytest.fixture(scope="module")
def model_dir(learn_comparison) -> Path:
    # the warm-started model the comparison built and started from
    return learn_comparison[1]


@pytest.fixture(scope="module")
def grpo_run(learn_comparison) -> tuple[Path, dict[int, dict]]:
    """The GRPO run of the CPU comparison (tests/e2e/conftest.py): train_grpo.py on the learn config for its 12
    steps, from the same model and seeds as the negated run, checkpointed at the end: (its output folder, its
    metrics). Sharing it keeps the suite's most expensive runs to one each."""
    grpo = learn_comparison[0] / "grpo"
    return grpo / "train", read_metrics(grpo / "metrics.jsonl")


@pytest.fixture(scope="module")
def negated_run(tmp_path_factory, model_dir, grpo_run) -> dict[int, dict]:
    workdir = tmp_path_factory.mktemp("learn_negated")
    return train(workdir, model_dir, "algorithm.adv_estimator=negated_grpo", env=negated_env(), steps=NEGATED_STEPS)


@pytest.mark.slow
def test_grpo_raises_the_training_reward(grpo_run):
    _, metrics = grpo_run
    rewards = curve(metrics)
    print(f"GRPO reward per step: {np.round(rewards, 3).tolist()}, gain {gain(rewards):+.3f}")
    assert gain(rewards) >= MIN_GAIN, f"GRPO did not learn: reward per step {np.round(rewards, 3).tolist()}"
    # the reward that rose is our format reward, scored by rg_verl.reward on our dataset's items
    assert gain(curve(metrics, FORMAT_OK)) >= MIN_GAIN
    for step in metrics.values():
        assert step["train/reasoning_gym/chain_sum/term/format"] == pytest.approx(step[FORMAT_OK])
        # the rollout served the actor's weights: a missed sync would differ by tenths once the format
        # probability moves; what remains is float noise of differently padded batches (about 0.005
        # here, from step 1 on, before any update)
        assert step["training/rollout_probs_diff_max"] < 0.05


@pytest.mark.slow
def test_the_run_logs_its_dead_groups_as_its_rewards_allow(grpo_run):
    """Each step's share of all-right and all-wrong groups (no advantage under GRPO) against the accuracy it
    logged: with groups of equal size, all-right groups alone give at least that share of right answers."""
    _, metrics = grpo_run
    prefix = "train/reasoning_gym/chain_sum/"
    for step in metrics.values():
        right, wrong = step[prefix + "groups/all_correct"], step[prefix + "groups/all_wrong"]
        assert 0.0 <= right <= step[prefix + "accuracy"] <= 1.0 - wrong <= 1.0
    assert any(step[prefix + "groups/all_wrong"] > 0 for step in metrics.values())  # the start answers few right


@pytest.mark.slow
def test_negated_advantage_does_not_learn(grpo_run, negated_run):
    rewards = curve(negated_run, steps=NEGATED_STEPS)
    print(f"negated reward per step: {np.round(rewards, 3).tolist()}, gain {gain(rewards):+.3f}")
    assert gain(rewards) <= MAX_NEGATED_GAIN, f"learned with negated advantages: {np.round(rewards, 3).tolist()}"
    # from the same model and seeds, the two runs end far apart
    grpo_rewards = curve(grpo_run[1])
    assert late_peak(rewards) <= late_peak(grpo_rewards) - MIN_GAIN


@pytest.mark.slow
def test_run_draws_its_reward_curve_from_verls_metrics(grpo_run):
    out, metrics = grpo_run
    png = out / "reward_curve.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    drawn = json.loads((out / "reward_curve.json").read_text())
    assert {int(step): value for step, value in drawn.items()} == {
        step: pytest.approx(values[REWARD]) for step, values in metrics.items()
    }


@pytest.mark.slow
def test_warm_start_makes_the_format_reachable_not_saturated(grpo_run, negated_run, model_dir):
    from rg_verl.cpu.warm_start import WARM_START_RECORD

    record = json.loads((model_dir / WARM_START_RECORD).read_text())
    assert record["options"]["warm_start"]["format_rate"] == 0.3
    # step 1 of either run samples the warm-started model before any update (64 responses)
    rate = np.mean([grpo_run[1][1][FORMAT_OK], negated_run[1][FORMAT_OK]])
    assert 0.05 <= rate <= 0.6, rate


def test_negated_grpo_is_minus_verls_grpo_advantage():
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage, get_adv_estimator_fn

    negated = importlib.import_module("tests.negated_grpo")
    assert get_adv_estimator_fn("negated_grpo") is negated.compute_negated_grpo_advantage
    rewards = torch.zeros(6, 4)
    rewards[:, -1] = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.5])
    mask = torch.ones(6, 4)
    index = np.array(["a", "a", "a", "b", "b", "b"])
    for norm in (True, False):
        expected, _ = compute_grpo_outcome_advantage(rewards, mask, index, norm_adv_by_std_in_grpo=norm)
        got, _ = negated.compute_negated_grpo_advantage(
            token_level_rewards=rewards, response_mask=mask, index=index, config={"norm_adv_by_std_in_grpo": norm}
        )
        assert torch.allclose(got, -expected) and expected.abs().sum() > 0


@pytest.mark.filterwarnings("ignore:Disabled critic")  # GRPO has no critic, as intended
def test_negated_grpo_passes_verl_config_validation():
    from hydra import compose, initialize_config_dir
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    from rg_verl.grpo.launch import apply_device_settings

    with initialize_config_dir(config_dir=str(REPO / "configs" / "smoke"), version_base=None):
        config = compose(config_name="learn", overrides=["algorithm.adv_estimator=negated_grpo"])
    apply_device_settings(config)
    assert not need_critic(config)  # a custom estimator is not GAE: no critic, as for grpo
    validate_config(config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
