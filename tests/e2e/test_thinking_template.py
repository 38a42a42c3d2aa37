"""A thinking model: its chat template opens the assistant turn with ``<think>``, and rg-verl judges the format
on that turn, in training (the reward) and in evaluation.

The tiny model here is built with ``tiny_model.thinking_template=true`` and a warm start that, as for a thinking
model, writes what follows the template's ``<think>``: a thought, ``</think>``, an answer block. It never writes
``<think>`` itself, so every response in the format is one that counts the template's tag.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rg_verl.evaluation.config import parse_config
from rg_verl.evaluation.runner import evaluate
from tests.helpers import read_metrics, run_train_grpo

pytestmark = pytest.mark.slow

WARM_START = "+tiny_model.warm_start={steps:150,format_rate:0.8,num_prompts:128}"
# Two runs of this module measured: the step's format_ok per dataset [1.0, 0.25] and [1.0, 0.75]; the evaluator's
# format rate 0.58 and 0.79 with the template's prefix, 0.00 both times for the response judged alone. Six seed
# sets since (data.seed 1 + s, rollout seed 42 + s; docs/testing.md, "False failures"): the step's mean 0.58-0.83,
# the evaluator's 0.67-0.83 with the prefix and 0.00 without.


@pytest.fixture(scope="module")
def thinking_run(tmp_path_factory) -> tuple[Path, dict[int, dict]]:
    """One GRPO step of the smoke config on a warm-started thinking model: (run folder, step -> metrics)."""
    workdir = tmp_path_factory.mktemp("thinking")
    env = {"RG_VERL_TINY_MODEL": str(workdir / "model"), "VERL_FILE_LOGGER_PATH": str(workdir / "metrics.jsonl")}
    run_train_grpo(
        workdir, "+tiny_model.thinking_template=true", WARM_START, "data.max_response_length=48",
        "trainer.total_training_steps=1", "trainer.val_before_train=false", "trainer.test_freq=-1",
        f"trainer.rollout_data_dir={workdir / 'rollouts'}", f"trainer.default_local_dir={workdir / 'ckpt'}",
        "trainer.logger=[console,file]", env=env,
    )  # fmt: skip
    return workdir, read_metrics(workdir / "metrics.jsonl")


def test_training_prompts_open_the_think_block_and_the_reward_counts_it(thinking_run):
    workdir, metrics = thinking_run
    rows = [json.loads(line) for line in (workdir / "rollouts" / "1.jsonl").read_text().splitlines()]
    assert rows and all(row["input"].endswith("assistant\n<think>\n") for row in rows)
    assert not any(row["output"].lstrip().startswith("<think>") for row in rows)  # the model writes what follows
    format_ok = [value for key, value in metrics[1].items() if key.endswith("/format_ok") and "/category/" not in key]
    print(f"format_ok per dataset: {format_ok}")
    assert format_ok and sum(format_ok) / len(format_ok) >= 0.2, format_ok


def format_rate(run_dir: Path) -> float:
    completions = [c for line in (run_dir / "items.jsonl").read_text().splitlines()
                   for c in json.loads(line)["completions"]]  # fmt: skip
    return sum(bool(c["format_ok"]) for c in completions) / len(completions)


def eval_config(model: Path, out: Path, **fields) -> dict:
    datasets = [{"dataset": "chain_sum", "size": 12, "seed": 3, "params": {"min_terms": 2, "max_terms": 2}}]
    return {
        "model_path": str(model), "backend": "hf", "device": "cpu", "max_tokens": 48, "temperature": 1.0,
        "top_p": 1.0, "eval_repeats": 2, "developer_prompt": "default", "output_dir": str(out),
        "categories": [{"category": "arithmetic", "datasets": datasets}], **fields,
    }  # fmt: skip


def test_the_evaluator_counts_the_templates_think_tag_and_passes_the_template_arguments(thinking_run, tmp_path):
    from transformers import AutoTokenizer

    from rg_verl.evaluation.backends.hf import prompt_token_ids

    model = thinking_run[0] / "model"
    auto = evaluate(parse_config(eval_config(model, tmp_path, run_name="auto")))
    written = evaluate(parse_config(eval_config(model, tmp_path, run_name="written", response_prefix="")))
    # the same model and items, sampled twice: judged on its own text, hardly a response has the format
    print(f"format rate: auto {format_rate(auto):.2f}, the response alone {format_rate(written):.2f}")
    assert format_rate(auto) >= 0.2 and format_rate(auto) >= format_rate(written) + 0.15
    assert json.loads((auto / "run.json").read_text())["fingerprint"]["settings"]["response_prefix"] == "auto"
    # enable_thinking=False reaches the prompt the hf backend generates from: the template closes the block
    tokenizer = AutoTokenizer.from_pretrained(model)
    ids = prompt_token_ids(tokenizer, [{"role": "user", "content": "q"}], {"enable_thinking": False})
    assert tokenizer.decode(ids).endswith("assistant\n<think>\n\n</think>\n\n")
