"""Tests of ``rg-verl demo``: the question loop (rg_verl.evaluation.demo), scored dataset items, the command line
(rg_verl.evaluation.cli.demo)."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest
from omegaconf import OmegaConf
from reasoning_gym.utils import SYSTEM_PROMPTS

from rg_verl.common.names import MAX_SEED
from rg_verl.data.dataset import ReasoningGymDataset
from rg_verl.evaluation.cli import parse_demo_args
from rg_verl.evaluation.demo import run_demo, split_response
from tests.helpers import REPO


def demo_command(*args: str, stdin: str) -> subprocess.CompletedProcess:
    """``rg-verl demo *args`` (through the console command's own entry point), fed ``stdin``."""
    command = [sys.executable, "-m", "rg_verl.cli", "demo", *args]
    return subprocess.run(command, cwd=REPO, input=stdin, capture_output=True, text=True, timeout=300)


def eval_item(name: str, index: int, seed: int = 42) -> dict:
    """Item ``index`` of ``name``'s evaluation split, built as the evaluation builds its items."""
    section = {"datasets": {name: {"weight": 1}}, "seed": seed, "eval_size": index + 1, "system_prompt": ""}
    config = OmegaConf.create({"reasoning_gym": section})
    return ReasoningGymDataset("reasoning_gym://eval", None, config)[index]


def test_split_response():
    assert split_response("<think> a b </think>\n<answer> 4 </answer>") == ("a b", "4")
    assert split_response("a b </think> <answer>4</answer>") == ("a b", "4")  # the template opened the think
    assert split_response("no tags") == (None, None)


def test_a_correct_answer_to_a_dataset_item_scores_one():
    item = eval_item("chain_sum", 3)
    truth = item["reward_model"]["ground_truth"]
    prompts = []

    def generate(messages):
        prompts.append(messages)
        return f"<think>adding up</think>\n<answer>{truth}</answer>"

    out = io.StringIO()
    assert run_demo([":item chain_sum 3\n"], out, generate) == 0
    text = out.getvalue()
    question = item["raw_prompt"][-1]["content"]
    assert question in text
    assert "--- think\nadding up" in text and f"--- answer\n{truth}" in text
    assert f"--- reference\n{truth}" in text and "score: 1.00" in text
    assert prompts == [
        [{"role": "system", "content": SYSTEM_PROMPTS["default"]}, {"role": "user", "content": question}]
    ]


def test_a_wrong_answer_scores_zero_and_items_advance_without_an_index():
    out = io.StringIO()
    run_demo([":item leg_counting", ":item leg_counting"], out, lambda m: "<answer>-1</answer>", seed=7)
    text = out.getvalue()
    assert "leg_counting #0" in text and "leg_counting #1" in text
    assert eval_item("leg_counting", 1, seed=7)["raw_prompt"][-1]["content"] in text
    assert text.count("score: 0.00") == 2


def test_a_free_question_is_answered_without_a_score():
    seen = []

    def generate(messages):
        seen.append(messages)
        return "<think>easy</think><answer>4</answer>"

    out = io.StringIO()
    run_demo(["what is 2+2?"], out, generate, system_prompt="be brief")
    text = out.getvalue()
    assert "what is 2+2?" in text and "--- think\neasy" in text and "--- answer\n4" in text
    assert "score" not in text and "reference" not in text
    assert seen == [[{"role": "system", "content": "be brief"}, {"role": "user", "content": "what is 2+2?"}]]


def test_bad_commands_and_unknown_datasets_are_explained_and_the_loop_goes_on():
    asked = []
    lines = [":frobnicate", ":", ":item chian_sum", ":item", ":item chain_sum x", ":item chain_sum 100000000",
             ":help", "", "still here?", ":quit", "never asked"]  # fmt: skip
    out = io.StringIO()
    assert run_demo(lines, out, lambda m: asked.append(m[-1]["content"]) or "no tags \x1b[2J") == 0
    text = out.getvalue()
    assert "unknown command ':frobnicate'" in text and "unknown command ':'" in text
    assert "unknown reasoning-gym dataset 'chian_sum'" in text and "chain_sum" in text
    assert text.count("usage: :item <dataset> [index]") == 2
    assert "out of range" in text and ":item <dataset> [index]" in text
    assert asked == ["still here?"]  # nothing after :quit
    assert "(no <answer>...</answer> in the response)" in text
    assert "\x1b" not in text and "\\x1b[2J" in text  # model output cannot drive the terminal


def test_a_failing_generation_does_not_end_the_session():
    def generate(messages):
        if "boom" in messages[-1]["content"]:
            raise RuntimeError("out of memory")
        return "<answer>ok</answer>"

    out = io.StringIO()
    run_demo(["boom", "fine"], out, generate)
    assert "generation failed: RuntimeError('out of memory')" in out.getvalue()
    assert "--- answer\nok" in out.getvalue()


def test_demo_on_a_tiny_model_from_piped_stdin(tiny_model):
    stdin = ":item chain_sum 0\nwhat is 2+2?\n:oops\n:item no_such_dataset\n:help\n"  # ends at EOF, no :quit
    proc = demo_command(str(tiny_model), "--max-tokens", "4", "--device", "cpu", stdin=stdin)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert eval_item("chain_sum", 0)["raw_prompt"][-1]["content"] in out
    assert "--- reference\n" in out and "score: " in out
    assert "=== question\nwhat is 2+2?" in out
    assert "unknown command ':oops'" in out and "unknown reasoning-gym dataset 'no_such_dataset'" in out
    assert out.startswith("=== chain_sum #0") and "\n> " not in out  # no prompt when stdin is not a terminal


def test_demo_with_a_missing_model_fails_cleanly(tmp_path):
    proc = demo_command(str(tmp_path / "missing"), "--device", "cpu", stdin="")
    assert proc.returncode == 1
    assert "cannot load a model" in proc.stderr and "Traceback" not in proc.stderr


def test_bad_arguments_are_usage_errors(capsys):
    assert parse_demo_args(["model", "--seed", str(MAX_SEED)]).seed == MAX_SEED  # the largest base seed
    for bad in (["--seed", str(MAX_SEED + 1)], ["--seed", "-1"], ["--max-tokens", "0"], ["--temperature", "-0.5"]):
        with pytest.raises(SystemExit) as info:
            parse_demo_args(["model", *bad])
        assert info.value.code == 2
    assert "--seed must be in [0, 999999999]" in capsys.readouterr().err


def test_the_demo_passes_template_arguments_and_reads_the_answer_after_the_templates_tag(tmp_path, monkeypatch):
    from transformers import AutoTokenizer

    from rg_verl.cpu.tiny_model import build_tiny_model
    from rg_verl.evaluation import cli
    from rg_verl.evaluation.backends.hf import HFBackend

    path = build_tiny_model(tmp_path / "model", hidden_size=32, num_layers=1, thinking_template=True)
    prompts, seen = [], {}
    real_prompt_ids, real_run_demo = HFBackend.prompt_ids, cli.run_demo
    monkeypatch.setattr(
        HFBackend, "prompt_ids", lambda self, m: prompts.append(real_prompt_ids(self, m)) or prompts[-1]
    )
    monkeypatch.setattr(cli, "run_demo", lambda *args, **kw: seen.update(kw) or real_run_demo(*args, **kw))
    monkeypatch.setattr(sys, "stdin", io.StringIO("what is 2+2?\n"))
    argv = [str(path), "--max-tokens", "2", "--device", "cpu", "--chat-template-kwargs", '{"enable_thinking": false}']
    assert cli.demo(argv) == 0
    empty_block = "<think>\n\n</think>\n\n"
    assert AutoTokenizer.from_pretrained(path).decode(prompts[0]).endswith("assistant\n" + empty_block)
    assert seen["response_prefix"] == empty_block
    # with the block the template opened, a response that only closes it has its think part and answer
    out = io.StringIO()
    run_demo(["what is 2+2?\n"], out, lambda m: "adding up</think>\n<answer>4</answer>", response_prefix="<think>\n")
    assert "--- think\nadding up" in out.getvalue() and "--- answer\n4" in out.getvalue()
