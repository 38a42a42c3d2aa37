"""A failed rollout never trains a short group (rg_verl/grpo/sampler.py), on the CPU smoke config with an ``hf``
rollout server that fails on demand (tests/failing_rollout.py, loaded into every Ray process)."""

from pathlib import Path

import pytest

from tests.helpers import plugin_env, read_metrics, run_train_grpo

pytestmark = pytest.mark.slow

EVICTED = "training/rollout_failure/evicted_samples"


def failing_env(mode: str, workdir: Path, model: Path) -> dict[str, str]:
    return {
        **plugin_env("failing_rollout"),
        "RG_VERL_FAIL_ROLLOUTS": mode,
        "RG_VERL_TINY_MODEL": str(model),
        "VERL_FILE_LOGGER_PATH": str(workdir / "metrics.jsonl"),
    }


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("failing_rollouts") / "model"  # built by the first run


def train(workdir: Path, model: Path, mode: str, *overrides: str, check: bool = True):
    return run_train_grpo(
        workdir, f"trainer.default_local_dir={workdir / 'out'}", "trainer.logger=[console,file]",
        "trainer.total_training_steps=2", "trainer.save_freq=-1", "trainer.test_freq=-1", *overrides,
        env=failing_env(mode, workdir, model), check=check,
    )  # fmt: skip


def test_a_group_with_a_failed_rollout_is_replaced_and_every_step_trains_full_groups(tmp_path, model):
    workdir = tmp_path / "once"
    workdir.mkdir()
    marker = tmp_path / "failed_once"
    proc = train(workdir, model, str(marker))
    assert marker.exists()  # one request did fail
    assert "test rollout failure" in proc.stdout + proc.stderr
    metrics = read_metrics(workdir / "metrics.jsonl")
    assert sorted(metrics) == [1, 2]
    # verl evicted the failed request's group (its other response too) and a fresh prompt replaced it; the
    # buffer checked every trained group for its rollout.n responses, or the run would have stopped
    assert sum(step.get(EVICTED, 0) for step in metrics.values()) == 1
    for step in metrics.values():
        assert step["train/reasoning_gym/chain_sum/groups/all_correct"] >= 0  # the step's groups were read back


def test_rollouts_that_always_fail_stop_the_run_with_the_reason(tmp_path, model):
    workdir = tmp_path / "always"
    workdir.mkdir()
    proc = train(workdir, model, "always", "trainer.v1.sampler.sampler_kwargs.max_refill_batches=1", check=False)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "more than max_refill_batches x data.train_batch_size = 4: either rollouts keep failing" in output
    assert not (workdir / "metrics.jsonl").exists() or not read_metrics(workdir / "metrics.jsonl")
