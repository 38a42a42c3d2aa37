"""Tests of rg_verl.evaluation.config: the declared fields, their errors, and every shipped evaluation YAML."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from rg_verl.common.schema import ConfigError, field_docs
from rg_verl.evaluation.backends import BACKENDS
from rg_verl.evaluation.cli import parse_args
from rg_verl.evaluation.config import EvalConfig, check_runtime, default_backend, load_config, parse_config
from rg_verl.evaluation.decoding import DecodingConfig
from rg_verl.evaluation.items import eval_datasets
from tests.helpers import REPO
from tests.unit.evaluation.fakes import small_config

CONFIGS = sorted((REPO / "evaluation" / "configs").rglob("*.yaml"))


def error_of(**overrides) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(small_config(**overrides))
    return str(info.value)


def test_config_errors_name_the_field_the_value_and_the_fix():
    assert "temprature: unknown key (did you mean 'temperature'?)" in error_of(temprature=0.5)
    assert error_of(temperature=-1).startswith("temperature: -1 ")
    assert error_of(top_p=0) == "top_p: 0 is not a number in (0, 1.0]; set one"
    assert error_of(eval_repeats=0).startswith("eval_repeats: 0 is not an integer in [1, ")
    message = error_of(k_values=[1, 4])
    assert "k_values[1]" in message and "[1, 2]" in message
    message = error_of(developer_prompt="DeepseekZero")
    assert "developer_prompt" in message and "DeepSeekZero" in message
    assert error_of(backend="tgi") == "backend: 'tgi' is not a backend; set one of vllm, hf, openai"
    assert "base_url" in error_of(backend="openai")
    assert "base_url" in error_of(backend="openai", base_url="localhost:8000") and "http" in error_of(backend="openai")
    assert "dtype" in error_of(dtype="fp8") and "bfloat16" in error_of(dtype="fp8")
    assert "model_path" in error_of(model_path=None)
    assert "scoring_mode" in error_of(scoring_mode="exact")
    assert "run_name" in error_of(run_name="a/b") and "plain folder name" in error_of(run_name="..")
    assert "math_datasets[0]" in error_of(math_datasets=["gsm8kk"])


def test_a_missing_required_field_is_named():
    config = small_config()
    del config["model_path"]
    with pytest.raises(ConfigError, match="^model_path: "):
        parse_config(config)
    with pytest.raises(ConfigError, match=r"^categories: needs a list of \{category, datasets\}"):
        parse_config({"model_path": "Qwen/Qwen2.5-0.5B-Instruct"})
    with pytest.raises(ConfigError, match=r"^categories\[0\]\.datasets\[0\]\.dataset: "):
        parse_config(small_config(categories=[{"category": "x", "datasets": [{"size": 3}]}]))
    with pytest.raises(ConfigError, match="^config: expected a mapping"):
        parse_config(["model_path"])


def test_config_errors_inside_categories():
    def categories_error(datasets) -> str:
        return error_of(categories=[{"category": "x", "datasets": datasets}])

    message = categories_error([{"dataset": "chain_summ"}])
    assert "categories[0].datasets[0].dataset" in message and "chain_sum" in message
    message = categories_error([{"dataset": "chain_sum", "params": {"min_terms": 0}}])
    assert "categories[0].datasets[0].params" in message and "reasoning-gym rejects" in message
    message = categories_error([{"dataset": "chain_sum", "params": {"seed": 3}}])
    assert "params.seed" in message and "next to params" in message
    assert categories_error([{"dataset": "chain_sum", "size": 0}]).startswith("categories[0].datasets[0].size: 0 ")
    assert "twice" in categories_error([{"dataset": "chain_sum"}, {"dataset": "chain_sum"}])
    assert "categories[0].datasets[0]: expected {dataset, size, seed, params}" in categories_error(["chain_sum"])
    assert "categories" in error_of(categories=[])


def test_the_backend_names_are_the_backends_dict():
    (backend,) = [f for f in dataclasses.fields(EvalConfig) if f.name == "backend"]
    assert backend.metadata["choices"] == tuple(BACKENDS)
    for name in BACKENDS:
        assert parse_config(small_config(backend=name, base_url="http://127.0.0.1:1/v1")).backend == name
    assert parse_args(["--config", "x.yaml", "--backend", "openai"]).backend == "openai"
    with pytest.raises(SystemExit):
        parse_args(["--config", "x.yaml", "--backend", "tgi"])


def test_max_tokens_on_the_command_line_replaces_the_configs():
    args = parse_args(["--config", "x.yaml", "--max-tokens", "8192"])
    path = REPO / "evaluation" / "configs" / "inter_generalisation" / "algorithmic.yaml"
    assert load_config(path, max_tokens=args.max_tokens).max_tokens == 8192
    assert load_config(path, max_tokens=None).max_tokens == 2048  # unset: the file's


def test_key_value_overrides_replace_the_configs_fields_and_the_options_apply_after_them():
    overrides = ["eval_repeats=4", "decoding.beam_width=3", "max_tokens=8", "categories.0.datasets.0.size=3"]
    args = parse_args(["--config", "x.yaml", *overrides[:2], "--max-tokens", "64", *overrides[2:]])
    assert args.overrides == overrides
    path = REPO / "evaluation" / "configs" / "smoke.yaml"
    config = load_config(path, args.overrides, max_tokens=args.max_tokens)
    assert (config.eval_repeats, config.decoding.beam_width, config.max_tokens) == (4, 3, 64)
    assert config.categories[0].datasets[0].size == 3
    assert load_config(path, ["max_tokens=8"]).max_tokens == 8  # no option: the override's


@pytest.mark.parametrize(
    ("override", "named"),
    [("oops", "'oops': an override is key=value"), ("=3", "'=3': an override is key=value"),
     ("eval_repats=2", "eval_repats: unknown key (did you mean 'eval_repeats'?)"),
     ("max_tokens=[1", "'max_tokens=[1': cannot set it in"),
     ("categories.9.size=1", "'categories.9.size=1': cannot set it in")],
)  # fmt: skip
def test_a_bad_override_is_named(override, named):
    with pytest.raises(ConfigError, match=re.escape(named)):
        load_config(REPO / "evaluation" / "configs" / "smoke.yaml", [override])


def test_every_field_is_documented_with_a_default():
    docs = {doc.name: doc for doc in field_docs(EvalConfig)}
    sections = {"decoding": DecodingConfig}  # a section is documented field by field, as decoding.<field>
    expected = {f.name for f in dataclasses.fields(EvalConfig) if f.name not in sections}
    expected |= {f"{name}.{f.name}" for name, cls in sections.items() for f in dataclasses.fields(cls)}
    assert set(docs) == expected
    assert all(doc.help for doc in docs.values()), [name for name, doc in docs.items() if not doc.help]
    assert docs["model_path"].shown == docs["categories"].shown == "required"
    assert docs["backend"].shown == "vllm if importable, else hf"
    assert (docs["max_tokens"].shown, docs["temperature"].shown, docs["save_metadata"].shown) == ("2048", "0.6", "true")


def test_defaults_and_blank_values():
    config = parse_config(
        {"model_path": "m/m", "categories": [{"category": "c", "datasets": [{"dataset": "chain_sum"}]}]}
    )
    assert (config.backend, config.k_values, config.name, config.system_prompt) == (
        default_backend(),
        [1],
        "eval",
        None,
    )
    entry = config.categories[0].datasets[0]
    assert (entry.size, entry.seed, entry.params, entry.source) == (100, 42, {}, None)
    # a blank (null) value takes the default where reasoning-gym's files may leave one blank, and is refused elsewhere
    blank = parse_config(small_config(dtype=None, developer_role=None, math_datasets=None, engine_kwargs=None))
    assert (blank.dtype, blank.developer_role, blank.math_datasets, blank.engine_kwargs) == ("auto", "system", [], {})
    assert "max_tokens: None" in error_of(max_tokens=None)
    assert "name: unknown key" in error_of(name="mine")  # load_config names the run after the file


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
    datasets = eval_datasets(config)  # reasoning-gym accepts every dataset's params
    assert datasets
    for dataset in datasets:
        if dataset.entry.source is None:
            assert len(dataset) == dataset.entry.size
        else:  # a file's rows, each once
            assert len(dataset) == min(dataset.entry.size, len(dataset.items.datasets[dataset.entry.dataset]))
    assert max(config.k_values) <= config.eval_repeats


def test_shipped_configs_cover_the_training_experiments():
    shipped = {p.relative_to(REPO / "evaluation" / "configs").with_suffix("").as_posix() for p in CONFIGS}
    assert "smoke" in shipped
    for experiment in (REPO / "configs").glob("*/*.yaml"):
        if experiment.name.startswith("_") or experiment.parent.name in ("smoke", "oreo", "compare"):
            # oreo: trains on collected files, evaluated with the config of the experiment they came from;
            # compare: each comparison names its evaluation config (tests/unit/compare/test_config.py)
            continue
        stem = experiment.stem
        if "generalisation" in experiment.parent.name:
            stem = stem.split("_qwen")[0]  # a category's file evaluates every model trained on it
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
    assert (
        config.dtype == "auto"
        and config.backend == default_backend()
        and config.name == f"{tmp_path.name}-eval_graphs_composite"
    )
    assert config.k_values == [1, 2, 3] and config.categories[0].datasets[0].params["p_solvable"] == 0.5
    with pytest.raises(ConfigError, match="--category 'games' is not in the config; its categories: reasoning"):
        load_config(path, category="games")
    with pytest.raises(ConfigError, match=rf"^{path}: max_tokens: 0 is not an integer"):
        load_config(path, max_tokens=0)


def math_config(*entries: dict, **overrides) -> dict:
    return small_config(categories=[{"category": "math", "datasets": list(entries)}], **overrides)


def test_parsing_reads_no_data_file(tmp_path, math_data, monkeypatch):
    """A file dataset's source is checked for its shape only: the reader is never called, a missing file passes."""
    import rg_verl.data.files

    def forbidden(*args, **kwargs):
        raise AssertionError("parse_config read a data file")

    monkeypatch.setattr(rg_verl.data.files, "read_rows", forbidden)
    monkeypatch.setattr(rg_verl.data.files, "check_sources", forbidden)
    missing = {"dataset": "gsm8k", "source": {"format": "gsm8k", "eval": str(tmp_path / "missing.parquet")}}
    math = {"dataset": "math", "source": {"format": "math", "val": str(math_data / "math/train.jsonl")}}
    config = parse_config(math_config(missing, {**math, "params": {"min_level": 2}}))
    assert [entry.source["format"] for entry in config.categories[0].datasets] == ["gsm8k", "math"]
    path = tmp_path / "eval.yaml"
    path.write_text(json.dumps(math_config(missing)))
    assert load_config(path).categories[0].datasets[0].source["eval"] == missing["source"]["eval"]


def test_file_dataset_shape_errors_name_the_evaluation_field(math_data):
    train_only = {"format": "gsm8k", "train": str(math_data / "gsm8k/train.parquet")}
    with pytest.raises(ConfigError, match=r"^categories\[0\]\.datasets\[0\]\.source\.eval: missing; set the eval file"):
        parse_config(math_config({"dataset": "gsm8k", "source": train_only}))
    csv = {"format": "gsm8k", "eval": str(math_data / "gsm8k/test.csv")}
    with pytest.raises(ConfigError, match=r"^categories\[0\]\.datasets\[0\]\.source\.eval: .*test\.csv' is not a"):
        parse_config(math_config({"dataset": "gsm8k", "source": csv}))
    math = {"format": "math", "eval": str(math_data / "math/train.jsonl")}
    with pytest.raises(ConfigError, match=r"^categories\[0\]\.datasets\[0\]\.params: min_level 9 exceeds max_level 2$"):
        parse_config(math_config({"dataset": "math", "source": math, "params": {"min_level": 9, "max_level": 2}}))
