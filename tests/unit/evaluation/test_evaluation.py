"""Tests of rg_verl.evaluation: config, metrics, backends (hf on the tiny model, openai against a local
server), scoring through the reward, reports and resume."""

from __future__ import annotations

import json
import math
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import rg_verl.reward
from rg_verl.config import ConfigError
from rg_verl.evaluation import BACKENDS, Completion, Sampling, evaluate, load_config, parse_config
from rg_verl.evaluation.backends import backend_class
from rg_verl.evaluation.backends.openai import OpenAIBackend, RequestError
from rg_verl.evaluation.cli import main as cli_main
from rg_verl.evaluation.config import check_runtime, default_backend
from rg_verl.evaluation.items import build_plans
from rg_verl.evaluation.metrics import aggregate, majority_answer, majority_correct, mean_at_k, pass_at_k
from rg_verl.evaluation.runner import ITEMS_FILE
from rg_verl.tiny_model import build_tiny_model
from tests.helpers import REPO

CONFIGS = sorted((REPO / "evaluation" / "configs").rglob("*.yaml"))


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("evaluation") / "tiny")


def small_config(**overrides) -> dict:
    config = {
        "model_path": "Qwen/Qwen2.5-0.5B-Instruct",
        "backend": "hf",
        "max_tokens": 4,
        "temperature": 0.7,
        "top_p": 1.0,
        "eval_repeats": 2,
        "developer_prompt": "default",
        "categories": [
            {
                "category": "arithmetic",
                "datasets": [
                    {"dataset": "chain_sum", "size": 3, "seed": 1, "params": {"min_terms": 2, "max_terms": 2}},
                    {"dataset": "leg_counting", "size": 2, "seed": 1},
                ],
            },
            {"category": "algorithmic", "datasets": [{"dataset": "spell_backward", "size": 2, "seed": 1}]},
        ],
    }
    config.update(overrides)
    return config


def answers_by_question(config) -> dict[str, str]:
    """question -> reference answer, for every item of the config."""
    answers = {}
    for plan in build_plans(config):
        for i in range(len(plan)):
            item = plan.dataset[i]
            answers[item["extra_info"]["entry"]["question"]] = item["reward_model"]["ground_truth"]
    return answers


class ScriptedBackend:
    """Answers each prompt with texts made from its reference answer; counts generate calls."""

    def __init__(self, answers: dict[str, str], script=None, fail_after_calls: int | None = None):
        self.answers = answers
        self.script = script or (lambda answer, j: f"<think>easy</think><answer>{answer}</answer>")
        self.fail_after_calls = fail_after_calls
        self.calls: list[int] = []

    def generate(self, prompts, n, sampling):
        if self.fail_after_calls is not None and len(self.calls) >= self.fail_after_calls:
            raise KeyboardInterrupt("simulated interruption")
        self.calls.append(len(prompts))
        outputs = []
        for messages in prompts:
            answer = self.answers[messages[-1]["content"]]
            outputs.append([Completion(self.script(answer, j), num_tokens=10 + j) for j in range(n)])
        return outputs

    def close(self):
        pass


# ---------------------------------------------------------------- metrics


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (10, 3, 1, 0.3),
        (10, 3, 2, 1 - 21 / 45),
        (10, 3, 5, 1 - 21 / 252),
        (10, 3, 8, 1.0),  # fewer than k wrong: some correct one is always drawn
        (3, 0, 3, 0.0),
        (3, 3, 1, 1.0),
        (1, 1, 1, 1.0),
        (200, 1, 100, 0.5),
    ],
)
def test_pass_at_k_known_values(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected)


def test_pass_at_k_rejects_bad_arguments():
    for n, c, k in [(3, 1, 4), (3, 4, 1), (3, 1, 0), (0, 0, 1)]:
        with pytest.raises(ValueError):
            pass_at_k(n, c, k)


@given(st.integers(1, 60).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n))))
def test_pass_at_k_properties(nc):
    n, c = nc
    values = [pass_at_k(n, c, k) for k in range(1, n + 1)]
    assert values[0] == pytest.approx(c / n)  # pass@1 is the accuracy
    assert all(0.0 <= v <= 1.0 for v in values)
    assert all(a <= b + 1e-12 for a, b in zip(values[:-1], values[1:], strict=True))  # monotone in k
    for k, value in enumerate(values, start=1):  # the binomial form
        assert value == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k), abs=1e-9)
    assert values[-1] == (1.0 if c else 0.0)
    if c < n:
        assert all(pass_at_k(n, c, k) <= pass_at_k(n, c + 1, k) + 1e-12 for k in range(1, n + 1))  # monotone in c


@given(st.lists(st.booleans(), min_size=1, max_size=20))
def test_mean_at_k_full_is_accuracy(correct):
    assert mean_at_k(correct, len(correct)) == pytest.approx(sum(correct) / len(correct))
    assert mean_at_k(correct, 1) == float(correct[0])


def test_majority_vote_table():
    assert majority_answer(["3", "4", "4", None, None, None]) == "4"
    assert majority_answer(["3", "4"]) == "3"  # tie: first seen wins
    assert majority_answer([None]) is None
    assert majority_correct(["3", "4", "4"], [False, True, True], 3) == 1.0
    assert majority_correct(["3", "3", "4"], [False, False, True], 3) == 0.0
    assert majority_correct(["3", "4", "4"], [False, True, True], 1) == 0.0
    assert majority_correct([None, None, "4"], [False, False, True], 3) == 1.0  # no answer: no vote
    assert majority_correct([None, None], [False, False], 2) == 0.0


@given(
    st.lists(
        st.lists(st.tuples(st.sampled_from(["a", "b", "c", None]), st.booleans()), min_size=3, max_size=3),
        min_size=1,
        max_size=8,
    )
)
def test_aggregate_properties(raw):
    # completions whose answer is the same get the same correctness, as with a real scorer
    truth = {"a": True, "b": False, "c": False, None: False}
    items = [
        [{"model_answer": a, "accuracy": float(truth[a]), "score": float(truth[a])} for a, _ in item] for item in raw
    ]
    metrics = aggregate(items, [1, 2, 3])
    assert metrics["pass@1"] == pytest.approx(metrics["accuracy"])
    assert metrics["mean@3"] == pytest.approx(metrics["accuracy"])
    assert metrics["pass@1"] <= metrics["pass@2"] + 1e-12 <= metrics["pass@3"] + 2e-12
    assert metrics["maj@3"] <= metrics["pass@3"] + 1e-12  # a correct majority needs a correct completion
    assert metrics["num_items"] == len(items) and metrics["num_completions"] == 3 * len(items)


def test_aggregate_rates_table():
    items = [
        [
            {"score": 1.0, "accuracy": 1.0, "correct_strict": 1.0, "correct_lenient": 1.0, "format_ok": 1.0,
             "answer_found": 1.0, "revised": 0.0, "self_corrected": 0.0, "num_tokens": 10, "model_answer": "x"},
            {"score": 1.0, "accuracy": 1.0, "correct_strict": 0.0, "correct_lenient": 1.0, "format_ok": 0.0,
             "answer_found": 1.0, "revised": 1.0, "self_corrected": 1.0, "num_tokens": 30, "model_answer": "x"},
        ],
        [
            {"score": 0.0, "accuracy": 0.0, "correct_strict": 0.0, "correct_lenient": 0.0, "format_ok": 0.0,
             "answer_found": 0.0, "revised": 0.0, "self_corrected": 0.0, "num_tokens": None, "model_answer": None},
            {"score": 0.0, "accuracy": 0.0, "correct_strict": 0.0, "correct_lenient": 0.0, "format_ok": 1.0,
             "answer_found": 1.0, "revised": 1.0, "self_corrected": 0.0, "num_tokens": 20, "model_answer": "y"},
        ],
    ]  # fmt: skip
    m = aggregate(items, [1, 2])
    assert (m["accuracy"], m["accuracy_strict"], m["accuracy_lenient"]) == (0.5, 0.25, 0.5)
    assert (m["format_rate"], m["answer_rate"], m["revision_rate"], m["self_correction_rate"]) == (0.5, 0.75, 0.5, 0.5)
    assert m["mean_response_tokens"] == 20.0  # unknown lengths are left out
    assert (m["pass@2"], m["maj@2"], m["mean@1"]) == (0.5, 0.5, 0.5)
    assert aggregate([], [1])["accuracy"] is None


# ---------------------------------------------------------------- config


def error_of(**overrides) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(small_config(**overrides))
    return str(info.value)


def test_config_errors_name_the_field_the_value_and_the_fix():
    assert "temprature: unknown key (did you mean 'temperature'?)" in error_of(temprature=0.5)
    assert "temperature" in error_of(temperature=-1) and "-1" in error_of(temperature=-1)
    assert "top_p" in error_of(top_p=0)
    assert "eval_repeats" in error_of(eval_repeats=0)
    message = error_of(k_values=[1, 4])
    assert "k_values[1]" in message and "[1, 2]" in message
    message = error_of(developer_prompt="DeepseekZero")
    assert "developer_prompt" in message and "DeepSeekZero" in message
    assert "backend" in error_of(backend="tgi") and "openai" in error_of(backend="tgi")
    assert "base_url" in error_of(backend="openai")
    assert "dtype" in error_of(dtype="fp8") and "bfloat16" in error_of(dtype="fp8")
    assert "model_path" in error_of(model_path=None)
    assert "scoring_mode" in error_of(scoring_mode="exact")


def test_config_errors_inside_categories():
    def categories_error(datasets) -> str:
        return error_of(categories=[{"category": "x", "datasets": datasets}])

    message = categories_error([{"dataset": "chain_summ"}])
    assert "categories[0].datasets[0].dataset" in message and "chain_sum" in message
    message = categories_error([{"dataset": "chain_sum", "params": {"min_terms": 0}}])
    assert "categories[0].datasets[0].params" in message and "reasoning-gym rejects" in message
    message = categories_error([{"dataset": "chain_sum", "params": {"seed": 3}}])
    assert "params.seed" in message and "next to params" in message
    assert "size" in categories_error([{"dataset": "chain_sum", "size": 0}])
    assert "twice" in categories_error([{"dataset": "chain_sum"}, {"dataset": "chain_sum"}])
    assert "categories" in error_of(categories=[])


def test_unknown_backend_lists_valid_names():
    with pytest.raises(ValueError, match="valid backends: vllm, hf, openai"):
        backend_class("tgi")
    assert set(BACKENDS) == {"vllm", "hf", "openai"}


def test_runtime_checks_come_before_any_model(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="model_path"):
        check_runtime(parse_config(small_config(model_path=str(tmp_path / "missing"))))
    monkeypatch.delenv("RG_EVAL_TEST_KEY", raising=False)
    config = parse_config(
        small_config(backend="openai", base_url="http://127.0.0.1:1/v1", api_key_env="RG_EVAL_TEST_KEY")
    )
    with pytest.raises(ConfigError, match="RG_EVAL_TEST_KEY"):
        check_runtime(config)
    if default_backend() == "hf":  # vllm is not installed here
        with pytest.raises(ConfigError, match="vllm"):
            check_runtime(parse_config(small_config(backend="vllm")))


@pytest.mark.parametrize("path", CONFIGS, ids=[str(p.relative_to(REPO / "evaluation" / "configs")) for p in CONFIGS])
def test_every_shipped_config_loads_and_validates(path):
    config = load_config(path)
    plans = build_plans(config)  # reasoning-gym accepts every dataset's params
    assert plans
    for plan in plans:
        if plan.entry.source is None:
            assert len(plan) == plan.entry.size
        else:  # a file's rows, each once
            assert len(plan) == min(plan.entry.size, len(plan.dataset.datasets[plan.entry.dataset]))
    assert max(config.k_values) <= config.eval_repeats


def test_shipped_configs_cover_the_training_experiments():
    shipped = {p.relative_to(REPO / "evaluation" / "configs").with_suffix("").as_posix() for p in CONFIGS}
    assert "smoke" in shipped
    for experiment in (REPO / "configs").glob("*/*.yaml"):
        if experiment.name.startswith("_") or experiment.parent.name == "smoke":
            continue
        stem = experiment.stem
        if "generalisation" in experiment.parent.name:
            stem = stem.removesuffix("_qwen_3b")
        elif experiment.parent.name == "math":  # one config per benchmark: gsm8k, math
            stem = stem.split("_")[0]
        assert f"{experiment.parent.name}/{stem}" in shipped, experiment


REFERENCE_STYLE = """\
# Model configuration
model_path: ../utils/qwen3b_graphs
max_tokens: 1024
temperature: 0.7  # Lower temperature for more focused responses
top_p: 0.9  # From rollout top_p
developer_prompt: DeepSeekZero
developer_role: system  # Standard role for system prompts

# Output configuration
output_dir: results
save_metadata: true
save_full_results: true
eval_repeats: 3

# Categories and datasets to evaluate
categories:
  - category: reasoning
    datasets:
    - dataset: course_schedule
      size: 100
      seed: 42
      params:
        min_num_courses: 5
        max_num_courses: 10
        p_solvable: 0.5
"""


def test_reference_style_config_without_dtype_loads(tmp_path):
    path = tmp_path / "eval_graphs_composite.yaml"
    path.write_text(REFERENCE_STYLE)
    config = load_config(path, category="reasoning")
    assert config.dtype == "auto" and config.backend == default_backend()
    assert config.k_values == [1, 2, 3] and config.categories[0].datasets[0].params["p_solvable"] == 0.5
    with pytest.raises(ConfigError, match="--category 'games' is not in the config; its categories: reasoning"):
        load_config(path, category="games")


def test_eval_items_come_from_the_evaluation_seed_space():
    plan = build_plans(parse_config(small_config()))[0]
    item = plan.dataset[0]
    assert item["extra_info"]["split"] == "eval" and item["data_source"] == "reasoning_gym/chain_sum"
    assert build_plans(parse_config(small_config()))[0].dataset[2] == plan.dataset[2]  # deterministic


# ---------------------------------------------------------------- scoring, reports, resume


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
    assert len(calls) == 7 * 4 and all(k["mode"] == "lenient" for k in calls)  # every completion, one scorer
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
    plans = build_plans(config)
    assert [len(plan) for plan in plans] == [4, 2]  # every row once: size only caps
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


def test_file_dataset_errors_name_the_evaluation_field(tmp_path, math_data):
    entry = {"dataset": "gsm8k", "source": {"format": "gsm8k", "eval": str(tmp_path / "missing.parquet")}}
    config = small_config(categories=[{"category": "math", "datasets": [entry]}])
    with pytest.raises(
        ConfigError, match=r"categories\[0\]\.datasets\[0\]\.source\.eval: .*missing\.parquet' does not exist"
    ):
        parse_config(config)
    entry = {"dataset": "gsm8k", "source": {"format": "gsm8k", "train": str(math_data / "gsm8k/train.parquet")}}
    with pytest.raises(ConfigError, match=r"categories\[0\]\.datasets\[0\]\.source\.eval: missing"):
        parse_config(small_config(categories=[{"category": "math", "datasets": [entry]}]))


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
    assert sum(backend.calls) == 7 - 4  # only the unfinished items were generated
    keys = [json.loads(line)["key"] for line in items_file.read_text().splitlines()]
    assert len(keys) == len(set(keys)) == 7
    results = json.loads((run_dir / "results.json").read_text())
    assert results["metrics"]["num_items"] == 7 and results["metrics"]["accuracy"] == 1.0

    backend = ScriptedBackend(answers)
    evaluate(config, resume=True, backend=backend)
    assert backend.calls == []  # nothing left to do; reports rebuilt


def test_hf_backend_end_to_end(tiny_model, tmp_path, capsys):
    path = tmp_path / "tiny.yaml"
    config = small_config(model_path=str(tiny_model), output_dir=str(tmp_path / "out"), device="cpu", batch_size=2)
    path.write_text(json.dumps(config))  # JSON is YAML
    assert cli_main(["--config", str(path), "--run-name", "run1"]) == 0
    run_dir = tmp_path / "out" / "run1"
    assert "## arithmetic" in capsys.readouterr().out

    results = json.loads((run_dir / "results.json").read_text())
    assert results["metadata"]["backend"] == "hf" and results["metadata"]["model"] == str(tiny_model)
    assert [c["name"] for c in results["categories"]] == ["arithmetic", "algorithmic"]
    datasets = [d for c in results["categories"] for d in c["datasets"]]
    assert [(d["name"], d["total_examples"]) for d in datasets] == [
        ("chain_sum", 3),
        ("leg_counting", 2),
        ("spell_backward", 2),
    ]
    everything = []
    for category in results["categories"]:
        pooled = []
        for d in category["datasets"]:
            items = [item["completions"] for item in d["results"]]
            assert all(len(c) == 2 for c in items)
            assert all(0 < c["num_tokens"] <= 4 for item in items for c in item)
            assert d["metrics"] == aggregate(items, [1, 2])  # metrics follow from the per-item scores
            assert d["average_score"] == pytest.approx(sum(i["mean_score"] for i in d["results"]) / len(d["results"]))
            pooled += items
        assert category["metrics"] == aggregate(pooled, [1, 2])
        everything += pooled
    assert results["metrics"] == aggregate(everything, [1, 2])

    summary = (run_dir / "summary.md").read_text()
    assert summary.count("| dataset |") == 2 and "| chain_sum |" in summary and "pass@2" in summary
    png = (run_dir / "scores.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 1000


# ---------------------------------------------------------------- openai backend


class FakeOpenAI:
    """An OpenAI-compatible chat-completions server on 127.0.0.1, for tests only.

    ``respond(messages, body) -> text``; the first ``fail_first`` requests get a 500; it records
    every request body and header and the most requests it saw in flight at once.
    """

    def __init__(self, respond, fail_first: int = 0, delay: float = 0.0):
        self.respond, self.fail_first, self.delay = respond, fail_first, delay
        self.lock = threading.Lock()
        self.requests: list[dict] = []
        self.authorization: list[str | None] = []
        self.in_flight = self.max_in_flight = 0
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with fake.lock:
                    fake.requests.append(body)
                    fake.authorization.append(self.headers.get("Authorization"))
                    number = len(fake.requests)
                    fake.in_flight += 1
                    fake.max_in_flight = max(fake.max_in_flight, fake.in_flight)
                try:
                    time.sleep(fake.delay)
                    if self.path != "/v1/chat/completions":
                        self._send(404, {"error": "not found"})
                    elif number <= fake.fail_first:
                        self._send(500, {"error": "overloaded"})
                    else:
                        text = fake.respond(body["messages"], body)
                        choice = {
                            "index": 0,
                            "message": {"role": "assistant", "content": text},
                            "finish_reason": "stop",
                        }
                        usage = {"completion_tokens": len(text.split()), "prompt_tokens": 1}
                        self._send(200, {"object": "chat.completion", "choices": [choice], "usage": usage})
                finally:
                    with fake.lock:
                        fake.in_flight -= 1

            def _send(self, code, payload):
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self):
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def test_openai_backend_retries_and_bounds_concurrency(monkeypatch):
    monkeypatch.setenv("RG_EVAL_TEST_KEY", "sekret")
    with FakeOpenAI(
        lambda messages, body: f"<answer>{messages[-1]['content']}</answer>", fail_first=1, delay=0.05
    ) as server:
        config = parse_config(
            small_config(backend="openai", base_url=server.url, api_key_env="RG_EVAL_TEST_KEY", served_model_name="m",
                         concurrency=3, max_retries=2, retry_backoff=0.01)
        )  # fmt: skip
        prompts = [[{"role": "user", "content": str(i)}] for i in range(6)]
        outputs = OpenAIBackend(config).generate(prompts, 2, Sampling(max_tokens=5, temperature=0.5, top_p=0.9))
    assert [[c.text for c in out] for out in outputs] == [[f"<answer>{i}</answer>"] * 2 for i in range(6)]
    assert outputs[0][0].num_tokens == 1
    assert len(server.requests) == 12 + 1  # one 500, retried
    assert 2 <= server.max_in_flight <= 3
    assert set(server.authorization) == {"Bearer sekret"}
    body = server.requests[-1]
    assert (body["model"], body["max_tokens"], body["temperature"], body["top_p"], body["n"]) == ("m", 5, 0.5, 0.9, 1)


def test_openai_backend_gives_up_with_a_clear_error():
    sampling = Sampling(max_tokens=5, temperature=0.0, top_p=1.0)
    with FakeOpenAI(lambda messages, body: "x", fail_first=10) as server:
        config = parse_config(small_config(backend="openai", base_url=server.url, max_retries=2, retry_backoff=0.0))
        with pytest.raises(RequestError, match="after 3 attempts.*500"):
            OpenAIBackend(config).complete([{"role": "user", "content": "hi"}], sampling)
        assert len(server.requests) == 3
    with FakeOpenAI(lambda messages, body: "x") as server:  # 404 is not retried
        config = parse_config(small_config(backend="openai", base_url=server.url + "/wrong", max_retries=3))
        with pytest.raises(RequestError, match="404"):
            OpenAIBackend(config).complete([{"role": "user", "content": "hi"}], sampling)
        assert len(server.requests) == 1


def test_openai_backend_end_to_end_against_a_served_tiny_model(tiny_model, tmp_path):
    """A local OpenAI-compatible server wrapping the hf backend: the "remote model" case."""
    hf_backend = BACKENDS["hf"](parse_config(small_config(model_path=str(tiny_model), device="cpu")))
    lock = threading.Lock()

    def respond(messages, body):
        with lock:  # one generate at a time on the shared model
            sampling = Sampling(max_tokens=body["max_tokens"], temperature=body["temperature"], top_p=body["top_p"])
            return hf_backend.generate([messages], 1, sampling)[0][0].text

    with FakeOpenAI(respond) as server:
        config = parse_config(
            small_config(
                model_path="tiny", backend="openai", base_url=server.url, output_dir=str(tmp_path), concurrency=4
            )
        )
        run_dir = evaluate(config)
    results = json.loads((run_dir / "results.json").read_text())
    assert results["metadata"]["backend"] == "openai" and results["metrics"]["num_completions"] == 7 * 2
    assert len(server.requests) == 14 and all(r["model"] == "tiny" for r in server.requests)
    assert server.requests[0]["messages"][0]["role"] == "system"  # the developer prompt travels
    assert (run_dir / "summary.md").exists() and (run_dir / "scores.png").exists()


# ---------------------------------------------------------------- batching benchmark, lm-evaluation-harness


def test_batching_benchmark_runs(tiny_model):
    from bench.eval_batching import compare_batching

    result = compare_batching(str(tiny_model), num_prompts=4, batch_size=4, max_tokens=4, device="cpu")
    assert result["one_at_a_time_s"] > 0 and result["batched_s"] > 0
    assert result["speedup"] == pytest.approx(result["one_at_a_time_s"] / result["batched_s"])


LMEH = REPO / "evaluation" / "lmeh"


def lmeh_utils():
    import importlib.util

    spec = importlib.util.spec_from_file_location("rg_verl_lmeh_utils", LMEH / "utils.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_lmeh_scoring_strict_and_flexible():
    utils = lmeh_utils()
    doc = {"question": "q", "answer": "2 + 3 = 5\n#### 1,005"}
    assert utils.gsm8k_target(doc) == "1005"
    table = {
        "<think>sum</think><answer>1005</answer>": (1.0, 1.0),
        "<answer>1,005</answer>": (1.0, 1.0),
        "so it is \\boxed{1005}": (0.0, 1.0),
        "the total is 1,005.": (0.0, 1.0),
        "<answer>7</answer> and 1005": (0.0, 0.0),
        "no idea": (0.0, 0.0),
    }
    for response, (strict, flexible) in table.items():
        scores = utils.process_gsm8k(doc, [response])
        assert (scores["exact_match"], scores["exact_match_flexible"]) == (strict, flexible), response
    math_doc = {"problem": "p", "solution": "Thus $x = \\boxed{\\frac{1}{2}}$."}
    assert utils.math_target(math_doc) == "\\frac{1}{2}"
    assert utils.process_math(math_doc, ["<answer>0.5</answer>"]) == {"exact_match": 1.0, "exact_match_flexible": 1.0}
    assert utils.process_math(math_doc, ["$\\boxed{1/2}$"])["exact_match_flexible"] == 1.0


def test_lmeh_tasks_load_in_the_task_manager():
    pytest.importorskip("lm_eval")
    import yaml
    from lm_eval.tasks import TaskManager
    from reasoning_gym.utils import SYSTEM_PROMPTS

    manager = TaskManager(include_path=str(LMEH), include_defaults=False)
    assert {"gsm8k_cot_rg", "math_algebra_rg"} <= set(manager.all_tasks)

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_constructor("!function", lambda loader, node: node.value)
    for name in ("gsm8k_cot_rg", "math_algebra_rg"):
        task = yaml.load((LMEH / f"{name}.yaml").read_text(), Loader=Loader)
        assert task["description"] == SYSTEM_PROMPTS["default"]  # the prompt rg-verl trains with


GSM8K_LOCAL = [
    {"question": "Tom has 3 apples and buys 2 more. How many apples does he have?", "answer": "3 + 2 = 5\n#### 5"},
    {"question": "A box holds 4 pens. How many pens are in 3 boxes?", "answer": "4 * 3 = 12\n#### 12"},
]


@pytest.mark.slow
def test_lm_eval_runs_our_gsm8k_task_on_the_tiny_model(tiny_model, tmp_path):
    """``lm_eval --model hf`` with gsm8k_cot_rg on two local items (the hub is out of reach here)."""
    import os
    import subprocess
    import sys

    pytest.importorskip("lm_eval")
    data = tmp_path / "gsm8k.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in GSM8K_LOCAL))
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "gsm8k_local.yaml").write_text(
        f"include: {LMEH / 'gsm8k_cot_rg.yaml'}\ntask: gsm8k_cot_rg_local\ntag: []\n"
        f"dataset_path: json\ndataset_name: null\ndataset_kwargs:\n  data_files:\n    test: {data}\n"
    )
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    command = [
        sys.executable, "-m", "lm_eval", "--model", "hf", "--model_args", f"pretrained={tiny_model},dtype=float32",
        "--include_path", str(tasks), "--tasks", "gsm8k_cot_rg_local", "--apply_chat_template",
        "--gen_kwargs", "max_gen_toks=8", "--device", "cpu", "--batch_size", "2",
        "--output_path", str(tmp_path / "out"),
    ]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    (results_file,) = (tmp_path / "out").rglob("results_*.json")
    results = json.loads(results_file.read_text())["results"]["gsm8k_cot_rg_local"]
    assert {"exact_match,none", "exact_match_flexible,none"} <= set(results)
