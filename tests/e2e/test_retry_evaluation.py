""""Wrong, try again" episodes in the evaluator, end to end on the CPU: ``evaluate_model.py``'s code with the
``hf`` backend on the learn config's warm-started tiny model (its answers are short and mostly wrong, so episodes do
take more than one try, and some end early on a right one).

Training in episodes is checked on verl's vLLM rollout (tests/vllm/test_grpo_vllm.py: the per-turn metrics of
training and validation, verl's turn counts, a checkpoint and a resume), the path a real run takes; the ``hf``
rollout's part of an episode (a continued conversation, tries that arrive one by one) is checked in
tests/unit/hf_rollout/test_hf_rollout.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rg_verl.common.compose import compose
from rg_verl.evaluation.cli import main as evaluate_main
from rg_verl.grpo.launch import ensure_model
from tests.helpers import CONFIGS_DIR

pytestmark = pytest.mark.slow

MAX_TURNS = 3


@pytest.fixture(scope="module")
def learn_model(tmp_path_factory) -> Path:
    """The learn config's tiny model with its warm start, built as ``train_grpo.py --config-name learn`` builds it."""
    path = tmp_path_factory.mktemp("retry") / "model"
    ensure_model(compose(str(CONFIGS_DIR / "smoke"), "learn", [f"actor_rollout_ref.model.path={path}"]))
    return path


def test_the_evaluator_runs_the_same_episodes_and_resumes_an_interrupted_run(tmp_path, learn_model):
    """evaluate_model.py's code with the hf backend on the warm-started model, in episodes of 3 tries; the run is
    cut after its first items (as a kill would leave it) and finished with --resume."""
    config = tmp_path / "retry.yaml"
    config.write_text(json.dumps({
        "model_path": str(learn_model), "backend": "hf", "device": "cpu", "max_tokens": 24, "temperature": 1.0,
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
