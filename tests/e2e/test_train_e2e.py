"""train_grpo.py end to end on the CPU smoke config: real verl GRPO steps, checkpoint, resume."""

import re
import subprocess
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.helpers import read_metrics, run_train_grpo

pytestmark = pytest.mark.slow


def train(
    workdir: Path, model_dir: Path, metrics: Path, *overrides: str, loggers: str = "[console,file]"
) -> subprocess.CompletedProcess:
    """train_grpo.py on the smoke config in ``workdir``, logging verl's metrics to ``metrics`` (and to W&B, offline,
    and TensorBoard under ``workdir`` where ``loggers`` names them)."""
    env = {"RG_VERL_TINY_MODEL": str(model_dir), "VERL_FILE_LOGGER_PATH": str(metrics), "WANDB_MODE": "offline",
           "WANDB_DIR": str(workdir), "WANDB_SILENT": "true",
           "TENSORBOARD_DIR": str(workdir / "tensorboard")}  # fmt: skip
    logging = [f"trainer.default_local_dir={workdir / 'ckpt'}", f"trainer.logger={loggers}"]
    return run_train_grpo(workdir, *logging, *overrides, env=env)


def load_actor_shard(actor_dir: Path) -> dict[str, torch.Tensor]:
    state = torch.load(actor_dir / "model_world_size_1_rank_0.pt", map_location="cpu", weights_only=False)
    return {name: t.full_tensor() if hasattr(t, "full_tensor") else t for name, t in state.items()}


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    """Two steps on the quiet console; what it printed is kept in ``console.txt``."""
    workdir = tmp_path_factory.mktemp("smoke")
    proc = train(
        workdir,
        workdir / "model",
        workdir / "metrics_first.jsonl",
        "trainer.total_training_steps=2",
        "trainer.save_freq=2",
        "trainer.test_freq=2",
        "trainer.console=progress",
        loggers="[console,file,wandb,tensorboard]",
    )
    (workdir / "console.txt").write_text(proc.stdout + proc.stderr)
    return workdir


def test_the_quiet_console_shows_a_line_a_step_and_the_log_holds_verls_output(smoke_run):
    console = (smoke_run / "console.txt").read_text()
    [log] = (smoke_run / "ckpt" / "logs").glob("train-*.log")
    assert f"[rg-verl] verl's and Ray's logs: {log}" in console
    metrics = read_metrics(smoke_run / "metrics_first.jsonl")
    for step in (1, 2):
        reward = metrics[step]["critic/score/mean"]
        assert re.search(rf"^\[rg-verl\] step {step}/2  reward {reward:.3f}  accuracy \d\.\d{{3}}  [\d.]+ s/step  "
                         r"\d+:\d\d:\d\d left$", console, re.MULTILINE), console  # fmt: skip
    assert f"[rg-verl] the run finished; the full log: {log}" in console
    assert "step:1 - " not in console and "TaskRunnerV1" not in console  # verl's and Ray's output went to the log
    full = log.read_text()
    assert "step:1 - " in full and "step:2 - " in full and "[rg-verl] step 2/2" in full


def test_smoke_run_takes_grpo_steps_scored_by_our_reward(smoke_run):
    metrics = read_metrics(smoke_run / "metrics_first.jsonl")
    assert {1, 2} <= set(metrics)
    for step in (1, 2):
        assert metrics[step]["training/global_step"] == step
        assert "critic/advantages/mean" in metrics[step]
    # the rollout served the weights the actor had: its log-probs match the actor's
    assert metrics[2]["training/rollout_probs_diff_max"] < 1e-3
    # training and validation rewards came from rg_verl.reward: only it returns these keys
    for dataset in ("chain_sum", "leg_counting"):
        for step in (1, 2):
            prefix = f"train/reasoning_gym/{dataset}/"
            train = {key[len(prefix) :]: value for key, value in metrics[step].items() if key.startswith(prefix)}
            # the smoke config's reward: lenient correctness + 0.1 format + 0.05 length
            expected = train["correct_lenient"] + 0.1 * train["term/format"] + 0.05 * train["term/length"]
            assert train["score"] == pytest.approx(expected)
            assert train["term/length"] < 0  # real token counts reached the length term
        for key in ("accuracy", "correct_strict", "correct_lenient", "format_ok", "term/format", "term/length"):
            assert f"val-aux/reasoning_gym/{dataset}/{key}/mean@1" in metrics[2], key


def test_smoke_run_logs_to_wandb_and_tensorboard_files_their_readers_load(smoke_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from tests.helpers import wandb_history

    logged = read_metrics(smoke_run / "metrics_first.jsonl")
    ours = ["train/reasoning_gym/chain_sum/score", "train/reasoning_gym/leg_counting/groups/all_wrong",
            "train/reasoning_gym/category/arithmetic/score"]  # fmt: skip
    [run_log] = (smoke_run / "wandb").glob("offline-run-*/run-*.wandb")
    history = wandb_history(run_log)
    events = EventAccumulator(str(smoke_run / "tensorboard")).Reload()
    for key in ours:
        for step in (1, 2):
            assert history[step][key] == pytest.approx(logged[step][key]), (key, step)
        assert [(e.step, e.value) for e in events.Scalars(key)] == [
            (step, pytest.approx(logged[step][key])) for step in (1, 2)
        ], key
    assert "val-core/reasoning_gym/chain_sum/reward/mean@1" in history[2]


def test_smoke_run_updates_actor_weights_and_saves_checkpoint(smoke_run):
    actor = smoke_run / "ckpt" / "global_step_2" / "actor"
    assert (actor / "huggingface" / "config.json").is_file()
    trained = load_actor_shard(actor)
    initial = load_file(smoke_run / "model" / "model.safetensors")
    changed = [name for name, weight in initial.items() if not torch.equal(trained[name].to(weight.dtype), weight)]
    assert changed, "GRPO steps left every actor weight unchanged"


def test_resume_continues_from_checkpoint(smoke_run):
    train(
        smoke_run,
        smoke_run / "model",
        smoke_run / "metrics_resumed.jsonl",
        "trainer.total_training_steps=3",
        "trainer.save_freq=3",
        "trainer.test_freq=3",
        "trainer.resume_mode=auto",
    )
    metrics = read_metrics(smoke_run / "metrics_resumed.jsonl")
    assert min(metrics) == 3, f"resumed run logged steps {sorted(metrics)}, expected to start at 3"
    assert (smoke_run / "ckpt" / "global_step_3" / "actor" / "huggingface").is_dir()
    assert (smoke_run / "ckpt" / "latest_checkpointed_iteration.txt").read_text().strip() == "3"
