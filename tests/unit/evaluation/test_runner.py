"""Tests of rg_verl.evaluation.runner: every completion scored by the reward's scorer, saved as it finishes, resumed."""

from __future__ import annotations

import json
import re

import pytest

import rg_verl.reward
from rg_verl.common.schema import ConfigError
from rg_verl.evaluation import evaluate, parse_config
from rg_verl.evaluation.items import eval_datasets
from rg_verl.evaluation.runner import ITEMS_FILE
from tests.unit.evaluation.fakes import NUM_ITEMS, ScriptedBackend, answers_by_question, small_config


def test_strict_and_lenient_on_crafted_completions(tmp_path, monkeypatch):
    config = parse_config(small_config(output_dir=str(tmp_path), eval_repeats=4, k_values=[1, 4]))
    script = [
        lambda a: f"<think>ok</think><answer>{a}</answer>",  # strict format, correct
        lambda a: f"The answer is <answer>{a}</answer>",  # correct only for lenient extraction
        lambda a: f"<answer>zzz</answer> no wait, <answer>{a}</answer>",  # revised a wrong answer: self-corrected
        lambda a: "I do not know",  # no answer
    ]
    calls = []
    real = rg_verl.reward.compute_score
    monkeypatch.setattr(rg_verl.reward, "compute_score", lambda *a, **k: calls.append(k) or real(*a, **k))
    backend = ScriptedBackend(answers_by_question(config), script=lambda answer, j: script[j](answer))
    run_dir = evaluate(config, backend=backend)

    results = json.loads((run_dir / "results.json").read_text())
    assert len(calls) == NUM_ITEMS * 4 and all(k["mode"] == "lenient" for k in calls)  # every completion, one scorer
    m = results["metrics"]
    assert m["accuracy_strict"] == pytest.approx(0.25) and m["accuracy_lenient"] == pytest.approx(0.75)
    assert m["accuracy"] == pytest.approx(0.75) and m["format_rate"] == pytest.approx(0.25)
    assert m["revision_rate"] == pytest.approx(0.25) and m["self_correction_rate"] == 1.0
    assert m["pass@1"] == pytest.approx(0.75) and m["pass@4"] == 1.0 and m["maj@4"] == 1.0
    assert m["mean_response_tokens"] == pytest.approx(11.5)

    strict = parse_config(small_config(output_dir=str(tmp_path), eval_repeats=4, scoring_mode="strict"))
    backend = ScriptedBackend(answers_by_question(strict), script=lambda answer, j: script[j](answer))
    m = json.loads((evaluate(strict, backend=backend) / "results.json").read_text())["metrics"]
    assert m["accuracy"] == pytest.approx(0.25) and m["accuracy_lenient"] == pytest.approx(0.75)


def test_a_thinking_templates_responses_are_voted_on_by_the_answer_the_reward_reads(tmp_path):
    """The template opens <think>, so the model writes the rest of the block: strict scoring, the format rate and
    the majority vote all read the answer after the template's tag."""
    config = parse_config(small_config(output_dir=str(tmp_path), eval_repeats=3, k_values=[1, 3],
                                       scoring_mode="strict", response_prefix="<think>\n"))  # fmt: skip
    script = [
        lambda a: f"easy</think><answer>{a}</answer>",
        lambda a: f"easy</think><answer>{a}</answer>",
        lambda a: "hmm</think><answer>zzz</answer>",
    ]
    backend = ScriptedBackend(answers_by_question(config), script=lambda answer, j: script[j](answer))
    run_dir = evaluate(config, backend=backend)
    m = json.loads((run_dir / "results.json").read_text())["metrics"]
    assert m["accuracy"] == pytest.approx(2 / 3) and m["format_rate"] == 1.0
    assert m["maj@3"] == 1.0  # two of three vote for the right answer
    records = [json.loads(line) for line in (run_dir / "items.jsonl").read_text().splitlines()]
    assert {c["model_answer"] for r in records for c in r["completions"]} >= {"zzz"}


def test_gsm8k_and_math_files_are_evaluated_row_by_row_with_math_verify(tmp_path, math_data):
    gsm8k = {"format": "gsm8k", "eval": str(math_data / "gsm8k/train.parquet")}
    math = {"format": "math", "eval": str(math_data / "math/train.jsonl")}
    config = parse_config(
        small_config(
            output_dir=str(tmp_path),
            eval_repeats=2,
            categories=[
                {
                    "category": "math",
                    "datasets": [
                        {"dataset": "gsm8k", "size": 100, "source": gsm8k},
                        {"dataset": "math_hard", "size": 100, "source": math, "params": {"min_level": 4}},
                    ],
                }
            ],
        )
    )
    assert [len(dataset) for dataset in eval_datasets(config)] == [4, 2]  # every row once: size only caps
    # one equivalent form in a box, one wrong answer in tags
    script = [lambda a: f"so the answer is \\boxed{{{a}}}", lambda a: "<answer>-1</answer>"]
    backend = ScriptedBackend(answers_by_question(config), script=lambda answer, j: script[j](answer))
    run_dir = evaluate(config, backend=backend)
    results = json.loads((run_dir / "results.json").read_text())
    assert results["metrics"]["accuracy"] == pytest.approx(0.5)
    assert results["metrics"]["accuracy_strict"] == 0.0 and results["metrics"]["answer_rate"] == 1.0
    records = [json.loads(line) for line in (run_dir / "items.jsonl").read_text().splitlines()]
    answers = {r["completions"][0]["model_answer"] for r in records if r["dataset"] == "math_hard"}
    assert answers == {"2\\sqrt{3}", "5"}


def test_resume_after_interruption_finishes_each_item_once(tmp_path):
    config = parse_config(small_config(output_dir=str(tmp_path), save_every=2))
    answers = answers_by_question(config)
    with pytest.raises(KeyboardInterrupt):
        evaluate(config, backend=ScriptedBackend(answers, fail_after_calls=2))
    (run_dir,) = [p.parent for p in tmp_path.glob(f"*/{ITEMS_FILE}")]
    items_file = run_dir / ITEMS_FILE
    assert len(items_file.read_text().splitlines()) == 4
    with open(items_file, "a") as f:  # a write torn by the interruption
        f.write('{"key": "arithmetic/leg_count')

    with pytest.raises(ConfigError, match="--resume"):  # no silent overwrite of a run
        evaluate(
            parse_config(small_config(output_dir=str(tmp_path), run_name=run_dir.name)),
            backend=ScriptedBackend(answers),
        )
    with pytest.raises(ConfigError, match="temperature"):  # a resumed run keeps its settings
        evaluate(
            parse_config(small_config(output_dir=str(tmp_path), temperature=0.1)),
            resume=True,
            backend=ScriptedBackend(answers),
        )
    backend = ScriptedBackend(answers)
    assert evaluate(config, resume=True, backend=backend) == run_dir
    assert sum(backend.calls) == NUM_ITEMS - 4  # only the unfinished items were generated
    keys = [json.loads(line)["key"] for line in items_file.read_text().splitlines()]
    assert len(keys) == len(set(keys)) == NUM_ITEMS
    results = json.loads((run_dir / "results.json").read_text())
    assert results["metrics"]["num_items"] == NUM_ITEMS and results["metrics"]["accuracy"] == 1.0

    backend = ScriptedBackend(answers)
    evaluate(config, resume=True, backend=backend)
    assert backend.calls == []  # nothing left to do; reports rebuilt


class EveryThree(ScriptedBackend):
    @classmethod
    def default_save_every(cls, config) -> int:
        return 3


def test_results_are_saved_as_often_as_the_backend_or_the_config_says(tmp_path):
    config = parse_config(small_config(output_dir=str(tmp_path)))
    answers = answers_by_question(config)
    backend = ScriptedBackend(answers)  # the Backend default: every prompt in one call
    evaluate(config, backend=backend)
    assert backend.calls == [NUM_ITEMS]
    backend = EveryThree(answers)
    evaluate(config, backend=backend)
    assert backend.calls == [3, 3, 1]
    backend = EveryThree(answers)
    evaluate(parse_config(small_config(output_dir=str(tmp_path), save_every=5)), backend=backend)
    assert backend.calls == [5, 2]  # the config's save_every wins


@pytest.mark.parametrize(
    "layout, file, params, message",
    [
        ("gsm8k", "{tmp}/missing.parquet", {}, "'{file}' does not exist; download GSM8K and MATH"),
        ("gsm8k", "{data}/math/train.jsonl", {}, "{file}: row 0 has no column 'question'"),
        ("math", "{data}/math/train.jsonl", {"types": ["Nope"]}, "{file}: no usable row for dataset 'gsm8k'"),
    ],
)
def test_file_errors_come_before_any_backend_and_name_the_field_and_the_file(
    tmp_path, math_data, monkeypatch, layout, file, params, message
):
    import rg_verl.evaluation.runner as runner

    file = file.format(tmp=tmp_path, data=math_data)
    entry = {"dataset": "gsm8k", "source": {"format": layout, "eval": file}, "params": params}
    categories = [{"category": "m", "datasets": [entry]}]
    config = parse_config(small_config(output_dir=str(tmp_path / "out"), categories=categories))
    monkeypatch.setattr(runner, "create_backend", lambda config: pytest.fail("a backend was created"))
    monkeypatch.setattr(runner, "check_runtime", lambda config: pytest.fail("the machine was checked before the files"))
    expected = "^" + re.escape("categories[0].datasets[0].source.eval: " + message.format(file=file))
    with pytest.raises(ConfigError, match=expected):
        evaluate(config)
    with pytest.raises(ConfigError, match=expected):  # a ready backend does not skip the check
        evaluate(config, backend=ScriptedBackend({}))
    assert not (tmp_path / "out").exists()  # no run folder either


def test_an_openai_run_killed_mid_way_against_a_flaky_server_resumes_with_every_item_once(tmp_path):
    """evaluate_model.py with the openai backend, SIGKILLed after some items, then --resume: the server answers a
    fifth of the requests with a 503 and drops a tenth without answering, and no item is lost or duplicated."""
    import signal
    import subprocess
    import sys
    import time

    import yaml

    from tests.helpers import REPO
    from tests.unit.evaluation.fakes import FakeOpenAI

    chain_sum = {"dataset": "chain_sum", "size": 16, "seed": 1, "params": {"min_terms": 2, "max_terms": 2}}
    data = small_config(categories=[{"category": "arithmetic", "datasets": [chain_sum]}], backend="openai",
                        model_path="served", base_url="http://127.0.0.1:9/v1", output_dir=str(tmp_path), run_name="run",
                        save_every=1, concurrency=2, max_retries=20, retry_backoff=0.01)  # fmt: skip
    answers = answers_by_question(parse_config(data))
    items = tmp_path / "run" / ITEMS_FILE

    def respond(messages, body):
        return f"<answer>{answers[messages[-1]['content']]}</answer>"

    with FakeOpenAI(respond, errors=0.2, drops=0.1, delay=0.1, seed=3) as server:
        config = tmp_path / "flaky.yaml"
        config.write_text(yaml.safe_dump({**data, "base_url": server.url}))
        command = [sys.executable, str(REPO / "evaluation" / "evaluate_model.py"), "--config", str(config)]
        run = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while not (items.exists() and items.read_text().count("\n") >= 4) and time.monotonic() < deadline:
            time.sleep(0.02)
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=30)
        before = items.read_text().count("\n")
        assert 4 <= before < 16, before  # killed mid-way
        subprocess.run([*command, "--resume"], check=True, capture_output=True, timeout=300)
    records = [json.loads(line) for line in items.read_text().splitlines()]
    keys = [record["key"] for record in records]
    assert len(keys) == len(set(keys)) == 16  # every item once
    assert all(c["accuracy"] == 1.0 for record in records for c in record["completions"])
    assert server.failed["errors"] > 0 and server.failed["drops"] > 0  # the flaky server did fail requests
    assert json.loads((tmp_path / "run" / "results.json").read_text())["metrics"]["num_items"] == 16


def test_a_served_model_whose_template_cannot_be_read_is_named_with_the_fix(tmp_path, caplog):
    served = {"backend": "openai", "model_path": "my-served-model", "base_url": "http://localhost:1/v1"}
    for prefix, warned in (("auto", True), ("<think>\n", False)):
        config = parse_config(small_config(output_dir=str(tmp_path / prefix.strip()), response_prefix=prefix, **served))
        caplog.clear()
        with caplog.at_level("WARNING", logger="rg_verl.evaluation.runner"):
            evaluate(config, backend=ScriptedBackend(answers_by_question(config)))
        assert ("'my-served-model'" in caplog.text and "set response_prefix" in caplog.text) is warned
