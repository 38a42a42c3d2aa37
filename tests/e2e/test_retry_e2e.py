""""Wrong, try again" episodes end to end on the CPU: train_grpo.py with the ``rg_verl_retry`` agent loop and the
``hf`` rollout, on the learn config's warm-started tiny model (whose answers are short and mostly wrong, so
episodes do take more than one try), 2 steps validated at the second. A retry run's checkpoint and resume are
checked on verl's vLLM rollout (tests/vllm/test_grpo_vllm.py), the path a real run takes; each Ray run costs the
suite a minute or more."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rg_verl.evaluation.cli import main as evaluate_main
from tests.helpers import read_metrics, run_train_grpo

pytestmark = pytest.mark.slow

MAX_TURNS = 3
PREFIX = "train/reasoning_gym/chain_sum/"


def train(workdir: Path, steps: int, metrics: Path):
    return run_train_grpo(
        workdir, "--config-name", "learn", f"trainer.default_local_dir={workdir / 'ckpt'}",
        "trainer.logger=[console,file]", f"trainer.total_training_steps={steps}", "trainer.save_freq=-1",
        "trainer.test_freq=2", "actor_rollout_ref.rollout.agent.default_agent_loop=rg_verl_retry",
        f"retry.max_turns={MAX_TURNS}", "retry.discount=0.5", "data.max_response_length=96",
        env={"RG_VERL_LEARN_MODEL": str(workdir / "model"), "VERL_FILE_LOGGER_PATH": str(metrics)},
    )  # fmt: skip


@pytest.fixture(scope="module")
def retry_run(tmp_path_factory) -> tuple[dict[int, dict], Path]:
    """(step -> metrics, the warm-started model the run built)."""
    workdir = tmp_path_factory.mktemp("retry")
    train(workdir, 2, workdir / "metrics.jsonl")
    return read_metrics(workdir / "metrics.jsonl"), workdir / "model"


def test_episodes_retry_wrong_answers_and_log_success_at_each_turn(retry_run):
    steps, _ = retry_run
    assert sorted(steps) == [1, 2]
    for metrics in steps.values():
        solved = [metrics[f"{PREFIX}solved_by_turn_{j}"] for j in range(1, MAX_TURNS + 1)]
        assert solved == sorted(solved)  # success by turn j never falls with j
        assert solved[-1] == pytest.approx(metrics[f"{PREFIX}accuracy"])  # the last try's outcome
        assert 1.0 <= metrics[f"{PREFIX}turns"] <= MAX_TURNS
        # verl counts the prompt, each answer and each feedback turn: 2 per try
        assert 2 <= metrics["training/num_turns/min"] <= metrics["training/num_turns/max"] <= 2 * MAX_TURNS
    # wrong answers were retried: some episode took more than one try
    assert max(m[f"{PREFIX}turns"] for m in steps.values()) > 1.0
    assert max(m["training/num_turns/max"] for m in steps.values()) >= 4
    # validation runs the same episodes and logs them per dataset
    for j in range(1, MAX_TURNS + 1):
        assert f"val-aux/reasoning_gym/chain_sum/solved_by_turn_{j}/mean@1" in steps[2]
    assert "val-aux/reasoning_gym/chain_sum/turns/mean@1" in steps[2]


def test_the_evaluator_runs_the_same_episodes_and_resumes_an_interrupted_run(tmp_path, retry_run):
    """evaluate_model.py's code with the hf backend on the warm-started model, in episodes of 3 tries; the run is
    cut after its first items (as a kill would leave it) and finished with --resume."""
    model = retry_run[1]
    config = tmp_path / "retry.yaml"
    config.write_text(json.dumps({
        "model_path": str(model), "backend": "hf", "device": "cpu", "max_tokens": 24, "temperature": 1.0,
        "top_p": 1.0, "eval_repeats": 2, "save_every": 2, "retry": {"max_turns": MAX_TURNS, "discount": 0.5},
        "categories": [{"category": "arithmetic", "datasets": [
            {"dataset": "chain_sum", "size": 6, "params": {"min_terms": 2, "max_terms": 2, "max_digits": 1}}]}],
    }))  # fmt: skip
    command = ["--config", str(config), "--output-dir", str(tmp_path / "eval"), "--run-name", "retry"]
    assert evaluate_main(command) == 0
    items = tmp_path / "eval" / "retry" / "items.jsonl"
    finished = items.read_text().splitlines()
    items.write_text("\n".join(finished[:2]) + "\n")  # the run was killed after its first save
    assert evaluate_main([*command, "--resume"]) == 0
    records = [json.loads(line) for line in items.read_text().splitlines()]
    assert [r["key"] for r in records] == [json.loads(line)["key"] for line in finished]  # each item once, in order
    completions = [c for r in records for c in r["completions"]]
    assert max(len(c["tries"]) for c in completions) > 1  # wrong answers were tried again
    for c in completions:
        assert len(c["tries"]) == c["turns"] and c["full_model_response"] == c["tries"][-1]
    metrics = json.loads((tmp_path / "eval" / "retry" / "results.json").read_text())["metrics"]
    success = [metrics[f"success@turn{j}"] for j in range(1, MAX_TURNS + 1)]
    assert success == sorted(success) and success[-1] == pytest.approx(metrics["accuracy"])
    assert metrics["mean_turns"] == pytest.approx(sum(c["turns"] for c in completions) / len(completions))
