"""What the vLLM tier's tests share: a GRPO run of the learn config on verl's vLLM rollout (to its end, or started
in the background), the agreement check, an evaluation config on the vllm backend."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import run_train_grpo, start_train_grpo
from tests.unit.evaluation.fakes import small_config
from tests.vllm.conftest import HEAD64

# the rollout's and the actor's probabilities of the sampled tokens (verl syncs the weights in bfloat16 and vLLM
# samples in bfloat16; the actor scores in float32), per step: at most this far apart on average, and this
# correlated. Measured over 15 steps (the GRPO and the LoRA run of tests/vllm/test_grpo_vllm.py in two clean-clone
# CI runs and in a run beside other tests): mean 0.0019-0.0041, correlation 0.9996-1.0. The largest single
# difference (0.015-0.124) is one token in thousands, too noisy to bound. An engine the sync never reached keeps
# its dummy weights and gives every token about 1/1024, unrelated to the actor's probabilities: no correlation
# near this.
AGREEMENT = 0.02
CORRELATION = 0.99
# the actor's mean entropy, in nats, below which its distributions are far from uniform (ln 1024 = 6.93)
SHARP = 4.0


def train_args(workdir: Path, steps: int, *extra: str) -> list[str]:
    """``train_grpo.py``'s arguments for the learn config (its warm-started tiny model at head size 64, built in
    ``workdir``) with verl's vLLM rollout, 4 samples a prompt, validation and a checkpoint every 2 steps (and at the
    last); ``extra`` overrides."""
    sizes = [f"+tiny_model.{key}={value}" for key, value in HEAD64.items()]
    return [
        "--config-name", "learn", *sizes, "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.rollout.calculate_log_probs=true", f"trainer.default_local_dir={workdir / 'ckpt'}",
        "trainer.logger=[console,file]", f"trainer.total_training_steps={steps}", "trainer.save_freq=2",
        "trainer.test_freq=2", "data.max_response_length=48", "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=16", *extra,
    ]  # fmt: skip


def train_env(workdir: Path, metrics: Path) -> dict[str, str]:
    return {"RG_VERL_LEARN_MODEL": str(workdir / "model"), "VERL_FILE_LOGGER_PATH": str(metrics)}


def train(workdir: Path, steps: int, metrics: Path, *extra: str):
    """:func:`train_args`' run to its end; verl's metrics in ``metrics``."""
    return run_train_grpo(workdir, *train_args(workdir, steps, *extra), env=train_env(workdir, metrics))


def start(workdir: Path, steps: int, name: str, *extra: str, env: dict[str, str] | None = None):
    """:func:`train_args`' run in the background: its output in ``<name>.log``, verl's metrics in ``<name>.jsonl``;
    ``env`` added to its environment."""
    return start_train_grpo(workdir, *train_args(workdir, steps, *extra), log=workdir / f"{name}.log",
                            env={**train_env(workdir, workdir / f"{name}.jsonl"), **(env or {})})  # fmt: skip


def check_agreement(metrics: dict) -> None:
    assert metrics["training/rollout_probs_diff_valid"] == 1.0
    assert metrics["training/rollout_probs_diff_mean"] < AGREEMENT, metrics["training/rollout_probs_diff_mean"]
    assert metrics["training/rollout_actor_probs_pearson_corr"] > CORRELATION
    assert metrics["actor/entropy"] < SHARP  # the agreement is not that of two uniform distributions


def eval_config(model: Path, out: Path, **overrides) -> dict:
    """The evaluation tests' small config (7 items) on the vllm backend, ``device: cpu``, 3 repeats, float32."""
    settings = {"model_path": str(model), "backend": "vllm", "device": "cpu", "dtype": "float32", "max_tokens": 16,
                "eval_repeats": 3, "output_dir": str(out)}  # fmt: skip
    return small_config(**{**settings, **overrides})
