"""File datasets (rg_verl.data.files, rg_verl.data.formats): loaders, items, filters, checks, curriculum, reward."""

import fractions
import json
import logging
import random
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from rg_verl.common.names import source_name
from rg_verl.common.schema import ConfigError
from rg_verl.config import validate
from rg_verl.data import files
from rg_verl.data.config import ReasoningGymConfig
from rg_verl.data.curriculum import LevelCurriculum, MixState
from rg_verl.data.dataset import ReasoningGymDataset
from rg_verl.data.files import FileDataset, SourceError, check_sources, read_rows, training_questions
from rg_verl.data.formats import FORMATS, FileSource
from rg_verl.data.holdout import normalise
from rg_verl.reward import compute_score
from tests.helpers import REPO
from tests.math_fixtures import (
    GSM8K_REFERENCES,
    GSM8K_ROWS,
    GSM8K_TEST_ROWS,
    MATH_ROWS,
    MATH_TEST_ROWS,
    write_jsonl,
    write_math_dirs,
    write_parquet,
)

pytestmark = pytest.mark.usefixtures("no_scoring_deadline")


@pytest.fixture
def data(tmp_path):
    return write_math_dirs(tmp_path / "data")


def gsm8k(data, **extra) -> dict:
    return {
        "source": {
            "format": "gsm8k",
            "train": str(data / "gsm8k/train.parquet"),
            "val": str(data / "gsm8k/test.parquet"),
        },
        **extra,
    }


def math(data, config=None, **extra) -> dict:
    source = {"format": "math", "train": str(data / "math/train.jsonl"), "val": str(data / "math/test.jsonl")}
    return {"source": source, "config": config or {}, **extra}


def checked(section: dict, splits=("train", "val")) -> ReasoningGymConfig:
    """The section parsed (its shape) and its files checked, as a run does before Ray starts."""
    settings = ReasoningGymConfig.from_section(section)
    check_sources(settings, splits)
    return settings


def dataset(split: str, datasets: dict, **section) -> ReasoningGymDataset:
    config = OmegaConf.create({"reasoning_gym": {"datasets": datasets, **section}})
    return ReasoningGymDataset(f"reasoning_gym://{split}", None, config)


# --- loaders --------------------------------------------------------------------------------------


def test_gsm8k_items_have_the_reasoning_gym_item_format(data):
    train = dataset("train", {"gsm8k": gsm8k(data)}, train_size=4, system_prompt="Answer in <answer> tags.")
    items = [train[i] for i in range(4)]
    # n items cover the n rows once, in a seeded order
    assert sorted(item["reward_model"]["ground_truth"] for item in items) == sorted(GSM8K_REFERENCES)
    item = next(item for item in items if item["reward_model"]["ground_truth"] == "72")
    assert item["data_source"] == "math/gsm8k" and source_name(item["data_source"]) == "gsm8k"
    assert item["raw_prompt"] == [
        {"role": "system", "content": "Answer in <answer> tags."},
        {"role": "user", "content": GSM8K_ROWS[0]["question"]},
    ]
    assert item["extra_info"]["category"] == "math"
    entry = item["extra_info"]["entry"]
    assert entry["question"] == GSM8K_ROWS[0]["question"] and entry["answer"] == "72"
    assert entry["metadata"]["solution"] == GSM8K_ROWS[0]["answer"]
    # the same keys as a generated reasoning-gym item, so verl collates both alike
    generated = dataset("train", {"chain_sum": {}}, train_size=1)[0]
    assert set(item) == set(generated) and set(item["extra_info"]) == set(generated["extra_info"])


def test_validation_split_reads_its_own_file_and_eval_falls_back_to_it(data):
    val = dataset("val", {"gsm8k": gsm8k(data)}, val_size=2)
    assert {val[i]["reward_model"]["ground_truth"] for i in range(2)} == set(GSM8K_REFERENCES[:2])
    evaluation = dataset("eval", {"gsm8k": gsm8k(data)}, eval_size=3)
    # row i mod n: a split longer than its file wraps around
    answers = [evaluation[i]["reward_model"]["ground_truth"] for i in range(3)]
    assert set(answers[:2]) == {"72", "10"} and answers[2] == answers[0]


def test_math_reference_is_the_last_boxed_and_rows_without_one_are_skipped(data):
    train = dataset("train", {"math": math(data)}, train_size=6)
    entries = {train[i]["reward_model"]["ground_truth"]: train[i]["extra_info"]["entry"] for i in range(6)}
    assert set(entries) == {"\\frac{1}{2}", "3", "\\{-1, 1\\}", "2\\sqrt{3}", "5", "2"}
    metadata = entries["\\{-1, 1\\}"]["metadata"]
    assert metadata["level"] == 3 and metadata["type"] == "Algebra" and metadata["row"] == 2


def test_math_500_layout_with_integer_levels_and_answer_column(tmp_path):
    rows = [
        {"problem": "p1", "solution": "so \\boxed{7}", "answer": "7", "subject": "Algebra", "level": 2},
        {"problem": "p2", "solution": "no box here", "answer": "\\pi", "subject": "Geometry", "level": 4},
    ]
    path = write_jsonl(tmp_path / "math500.jsonl", rows)
    spec = {"source": {"format": "math", "train": str(path), "val": str(path)}, "config": {"types": ["Geometry"]}}
    item = dataset("train", {"math500": spec}, train_size=1)[0]
    assert item["reward_model"]["ground_truth"] == "\\pi"
    assert item["extra_info"]["entry"]["metadata"] == {
        "row": 1,
        "solution": "no box here",
        "level": 4,
        "type": "Geometry",
    }


@pytest.mark.parametrize(
    "config, levels",
    [
        ({}, {1, 2, 3, 4, 5, None}),
        ({"max_level": 2}, {1, 2}),
        ({"min_level": 3, "max_level": 4}, {3, 4}),
        ({"min_level": 5}, {5}),
    ],
)
def test_difficulty_filter(data, config, levels):
    train = dataset("train", {"math": math(data, config)}, train_size=20)
    seen = {train[i]["extra_info"]["entry"]["metadata"]["level"] for i in range(20)}
    # a level filter drops rows of unknown level ("Level ?")
    assert seen == levels


def test_type_filter(data):
    train = dataset("train", {"math": math(data, {"types": ["Algebra"]})}, train_size=4)
    assert {train[i]["extra_info"]["entry"]["metadata"]["type"] for i in range(4)} == {"Algebra"}


def test_files_mix_with_reasoning_gym_datasets(data):
    train = dataset("train", {"gsm8k": gsm8k(data), "math": math(data), "chain_sum": {"weight": 2}}, train_size=200)
    sources = [train[i]["data_source"] for i in range(200)]
    assert {"math/gsm8k", "math/math", "reasoning_gym/chain_sum"} == set(sources)
    assert sources.count("reasoning_gym/chain_sum") > sources.count("math/gsm8k")
    # deterministic: a new instance gives the same items
    again = dataset("train", {"gsm8k": gsm8k(data), "math": math(data), "chain_sum": {"weight": 2}}, train_size=200)
    assert [again[i]["raw_prompt"] for i in range(50)] == [train[i]["raw_prompt"] for i in range(50)]


def test_parquet_jsonl_and_json_read_the_same_rows(tmp_path):
    parquet = write_parquet(tmp_path / "a.parquet", GSM8K_ROWS)
    jsonl = write_jsonl(tmp_path / "a.jsonl", GSM8K_ROWS)
    plain = tmp_path / "a.json"
    plain.write_text(json.dumps(GSM8K_ROWS))
    assert list(read_rows(str(parquet))) == list(read_rows(str(jsonl))) == list(read_rows(str(plain))) == GSM8K_ROWS


def test_hub_source_goes_through_datasets_load_dataset(monkeypatch, tmp_path):
    import datasets

    calls = []

    def fake_load_dataset(path, name=None, split=None):
        calls.append((path, name, split))
        return GSM8K_ROWS if split == "test" else GSM8K_TEST_ROWS

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    hub = {"hub": "openai/gsm8k", "name": "main"}
    spec = {"source": {"format": "gsm8k", "train": {**hub, "split": "train"}, "val": {**hub, "split": "test"}}}
    val = dataset("val", {"gsm8k": spec}, val_size=4)
    assert sorted(val[i]["reward_model"]["ground_truth"] for i in range(4)) == sorted(GSM8K_REFERENCES)
    # the training split is read too, for the questions validation leaves out: each split once
    assert sorted(calls) == [("openai/gsm8k", "main", "test"), ("openai/gsm8k", "main", "train")]
    dataset("val", {"gsm8k": spec}, val_size=4)
    assert len(calls) == 2


# --- bad input ------------------------------------------------------------------------------------


def section(data, **datasets) -> dict:
    return {"datasets": datasets or {"gsm8k": gsm8k(data)}}


@pytest.mark.parametrize(
    "make, match",
    [
        (
            lambda d: {"gsm8k": {"source": {"format": "gsm9k", "train": "x"}}},
            r"source\.format: 'gsm9k' is not a layout",
        ),
        (lambda d: {"gsm8k": {"source": {"format": "gsm8k", "test": "x"}}}, r"source\.test: unknown key"),
        (lambda d: {"gsm8k": {"source": {"format": "gsm8k", "train": str(d / "gsm8k")}}}, r"is not a .parquet"),
        (
            lambda d: {"gsm8k": {"source": {"format": "gsm8k", "train": {"hub": "openai/gsm8k"}}}},
            r"source\.train: .* is not a hub source",
        ),
        (
            lambda d: {**{"gsm8k": gsm8k(d)}, "gsm8k": {**gsm8k(d), "config": {"max_level": 2}}},
            r"datasets\.gsm8k\.config\.max_level: unknown key for format 'gsm8k'",
        ),
        (lambda d: {"math": math(d, {"min_level": 4, "max_level": 2})}, r"config: min_level 4 exceeds max_level 2"),
        (lambda d: {"math": math(d, {"types": "Algebra"})}, r"config\.types: 'Algebra' is not a list"),
        (lambda d: {"a/b": gsm8k(d)}, r"'a/b' cannot name a file dataset"),
        (lambda d: {"gsm8k": {}}, r"unknown reasoning-gym dataset 'gsm8k'.*needs a 'source'"),
    ],
)
def test_a_bad_source_shape_names_the_field_and_the_fix_without_reading_files(data, make, match, monkeypatch):
    monkeypatch.setattr(files, "read_rows", lambda source: pytest.fail(f"the config check read {source}"))
    with pytest.raises(ConfigError, match=match):
        ReasoningGymConfig.from_section({"datasets": make(data)})


@pytest.mark.parametrize(
    "make, match",
    [
        (
            lambda d: {"gsm8k": {"source": {"format": "gsm8k", "train": str(d / "nope.parquet")}}},
            r"datasets\.gsm8k\.source\.train: .*nope\.parquet' does not exist; download GSM8K and MATH with "
            r"'python utils/download_math_data.py --out data'",
        ),
        (
            lambda d: {"gsm8k": {"source": {"format": "gsm8k", "train": str(d / "gsm8k/train.parquet")}}},
            r"datasets\.gsm8k\.source\.val: missing; set the val file of dataset 'gsm8k'",
        ),
        (
            lambda d: {"math": math(d, {"types": ["Astrology"]})},
            r"datasets\.math\.source\.train: .*train\.jsonl: no usable row for dataset 'math'",
        ),
        # the MATH layout on a GSM8K file: names the file, the missing columns and the ones it has
        (
            lambda d: {"m": {"source": {"format": "math", "train": str(d / "gsm8k/train.parquet")}}},
            r"datasets\.m\.source\.train: .*train\.parquet: row 0 has no column 'problem', 'solution' for format "
            r"'math' \(it has 'question', 'answer'\)",
        ),
    ],
)
def test_a_bad_source_file_is_found_by_check_sources_not_by_the_config_check(data, make, match):
    settings = ReasoningGymConfig.from_section({"datasets": make(data)})  # the shape is fine
    with pytest.raises(ConfigError, match=match):
        check_sources(settings)


@pytest.mark.parametrize(
    "content, match",
    [
        (b"PAR1 not really parquet", r"bad\.parquet: not a readable parquet file"),
    ],
)
def test_corrupt_parquet_is_named(tmp_path, content, match):
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(content)
    with pytest.raises(SourceError, match=match):
        read_rows(str(bad))
    with pytest.raises(ConfigError, match=r"source\.train: .*bad\.parquet"):
        checked({"datasets": {"g": {"source": {"format": "gsm8k", "train": str(bad)}}}}, splits=("train",))


def test_broken_json_lines_name_the_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(GSM8K_ROWS[0]) + "\n{oops\n")
    with pytest.raises(SourceError, match=r"bad\.jsonl: line 2 is not JSON"):
        read_rows(str(bad))


def test_a_validation_mix_needs_no_training_file_of_its_own(data):
    val_only = {"format": "gsm8k", "val": str(data / "gsm8k/test.parquet")}
    settings = checked({"datasets": {"chain_sum": {}}, "val_datasets": {"gsm8k": {"source": val_only}}})
    assert settings.val_datasets["gsm8k"].source.file("eval") == str(data / "gsm8k/test.parquet")
    with pytest.raises(ConfigError, match=r"reasoning_gym\.datasets\.gsm8k\.source\.train: missing"):
        checked({"datasets": {"gsm8k": {"source": val_only}}, "val_datasets": {"chain_sum": {}}})
    # a validation file missing from the validation mix is named there
    train_only = {"format": "gsm8k", "train": str(data / "gsm8k/train.parquet")}
    with pytest.raises(ConfigError, match=r"reasoning_gym\.val_datasets\.gsm8k\.source\.val: missing"):
        checked({"datasets": {"chain_sum": {}}, "val_datasets": {"gsm8k": {"source": train_only}}})


def test_the_evaluator_checks_only_the_eval_split_which_falls_back_to_val(data):
    val_only = {"format": "gsm8k", "val": str(data / "gsm8k/test.parquet")}
    settings = ReasoningGymConfig.from_section({"datasets": {"gsm8k": {"source": val_only}}}, where="eval")
    check_sources(settings, splits=("eval",), where="eval")
    with pytest.raises(ConfigError, match=r"^eval\.datasets\.gsm8k\.source\.train: missing"):
        check_sources(settings, splits=("train",), where="eval")
    broken = {"format": "gsm8k", "val": str(data / "gsm8k/test.parquet"), "eval": str(data / "no.jsonl")}
    settings = ReasoningGymConfig.from_section({"datasets": {"gsm8k": {"source": broken}}})
    check_sources(settings, splits=("val",))
    with pytest.raises(ConfigError, match=r"datasets\.gsm8k\.source\.eval: .*no\.jsonl' does not exist"):
        check_sources(settings, splits=("eval",))


def test_a_run_reads_each_file_once(data):
    """check_sources reads the files; the datasets built after it (and a second check) read none again."""
    files._cached_rows.cache_clear()
    files._cached_questions.cache_clear()
    section = {"datasets": {"gsm8k": gsm8k(data), "math": math(data, {"max_level": 3})}, "train_size": 8}
    section["curriculum"] = {"enabled": True, "levels": {"math": {"max_level": 2}}}
    settings = checked(section)
    assert files._cached_rows.cache_info().misses == 4  # train and val of each dataset
    # the training questions that validation leaves out: converted once per training file
    assert files._cached_questions.cache_info().misses == 2
    check_sources(settings)
    for split in ("train", "val", "eval"):
        built = dataset(split, section["datasets"], train_size=8, curriculum=section["curriculum"])
        assert built[0]["data_source"].startswith("math/")
    assert files._cached_rows.cache_info().misses == 4 and files._cached_questions.cache_info().misses == 2


# --- curriculum -----------------------------------------------------------------------------------


def test_level_curriculum_moves_within_its_range():
    curriculum = LevelCurriculum(2, 4)
    assert curriculum.get_max_level() == 2 and not curriculum.decrement_global_level()
    assert curriculum.increment_global_level() and curriculum.increment_global_level()
    assert curriculum.get_max_level() == 4 and not curriculum.increment_global_level()
    assert vars(curriculum.generate_configuration({"types": ["Algebra"]})) == {"types": ["Algebra"], "max_level": 4}


def test_math_curriculum_raises_the_maximum_level_with_success(data):
    curriculum = {"enabled": True, "levels": {"math": {"max_level": 1}}, "last_k": 4, "min_samples": 4}
    train = dataset("train", {"math": math(data, {"max_level": 3})}, train_size=12, curriculum=curriculum)
    assert {train[i]["reward_model"]["ground_truth"] for i in range(12)} == {"\\frac{1}{2}"}
    assert train.update({"math": [1.0] * 4}) == ["math"]
    assert {train[i]["extra_info"]["entry"]["metadata"]["level"] for i in range(12)} == {1, 2}
    assert train.state.metrics()["curriculum/math/level"] == 2.0
    train.update({"math": [1.0] * 4})
    train.update({"math": [1.0] * 4})  # the final maximum level is config.max_level
    assert train.state.metrics()["curriculum/math/level"] == 3.0
    # the level is saved with the run and restored on resume
    resumed = dataset("train", {"math": math(data, {"max_level": 3})}, train_size=12, curriculum=curriculum)
    resumed.load_state_dict(train.state_dict())
    assert [resumed[i]["raw_prompt"] for i in range(12)] == [train[i]["raw_prompt"] for i in range(12)]
    # validation stays at the configured difficulty
    val = dataset("val", {"math": math(data, {"max_level": 3})}, val_size=5, curriculum=curriculum)
    assert {val[i]["extra_info"]["entry"]["metadata"]["level"] for i in range(5)} == {1, 2, 3}


@pytest.mark.parametrize(
    "dataset_spec, levels, match",
    [
        ("gsm8k", {"max_level": 1}, r"levels\.gsm8k: format 'gsm8k' has no difficulty level"),
        ("math", {"max_level": 7}, r"levels\.math\.max_level: 7 is not an integer in \[1, 5\]"),
        ("math", {"level": 1}, r"levels\.math\.level: unknown attribute; valid: max_level"),
    ],
)
def test_bad_file_curriculum(data, dataset_spec, levels, match):
    specs = {"gsm8k": gsm8k(data), "math": math(data)}
    section = {"datasets": specs, "curriculum": {"enabled": True, "levels": {dataset_spec: levels}}}
    with pytest.raises(ConfigError, match=match):
        ReasoningGymConfig.from_section(section)


def test_mix_state_builds_level_curricula_for_file_datasets(data):
    settings = ReasoningGymConfig.from_section(
        {
            "datasets": {"math": math(data, {"min_level": 2})},
            "curriculum": {"enabled": True, "levels": {"math": {"*": 3}}},
        }
    )
    state = MixState(settings.datasets, settings.curriculum, settings.adaptive_weights)
    assert state.levels("math") == {"max_level": 3}
    assert state.dataset_config("math", {"min_level": 2}) == {"min_level": 2, "max_level": 3}


# --- reward ---------------------------------------------------------------------------------------


def score(response: str, answer: str, mode: str = "lenient", source: str = "math/math") -> dict:
    entry = {"question": "q", "answer": answer, "metadata": {}}
    return compute_score(source, response, answer, {"entry": entry}, mode=mode)


@pytest.mark.parametrize(
    "response",
    [
        "<think>half</think><answer>1/2</answer>",
        "<think>half</think><answer>0.5</answer>",
        "<think>half</think><answer>\\frac{1}{2}</answer>",
        "<think>half</think><answer>\\boxed{\\dfrac12}</answer>",
        "<answer>$\\frac{1}{2}$</answer>",
        # no answer tags: the last \boxed{}, in lenient mode
        "so the answer is \\boxed{\\dfrac12}",
        "first \\boxed{3}, no: \\boxed{0.5}",
    ],
)
def test_equivalent_forms_score_one(response):
    assert score(response, "\\frac{1}{2}")["score"] == 1.0


@pytest.mark.parametrize(
    "response",
    [
        "<answer>1/3</answer>",
        "<answer>2</answer>",
        "<answer>\\frac{2}{1}</answer>",
        "<answer>0.55</answer>",
        "<answer>-1/2</answer>",
        "\\boxed{\\frac{1}{3}}",
        "the answer is 1/2",  # neither tags nor a box: no answer
        "\\boxed{0.5} but finally <answer>3</answer>",  # the answer block wins over the box
    ],
)
def test_non_equivalent_forms_score_zero(response):
    result = score(response, "\\frac{1}{2}")
    assert result["score"] == 0.0 and result["scoring_failed"] == 0.0


def test_boxed_fallback_is_lenient_only_and_reports_no_format():
    result = score("so \\boxed{5}", "5", mode="strict")
    assert result["score"] == 0.0 and result["correct_lenient"] == 1.0 and result["format_ok"] == 0.0


def test_gsm8k_reference_against_model_answers(data):
    train = dataset("train", {"gsm8k": gsm8k(data)}, train_size=4)
    item = next(train[i] for i in range(4) if "1,200" in train[i]["raw_prompt"][-1]["content"])
    assert item["reward_model"]["ground_truth"] == "1234"  # from "#### 1,234"
    for response, expected in [
        ("<answer>1234</answer>", 1.0),
        ("<answer>1,234</answer>", 1.0),
        ("<answer>1234.0</answer>", 1.0),
        ("<answer>1243</answer>", 0.0),
    ]:
        result = compute_score(item["data_source"], response, item["reward_model"]["ground_truth"], item["extra_info"])
        assert result["score"] == expected, response


def test_self_correction_on_math_items():
    result = score("<answer>1/3</answer> wait, that is wrong. <answer>1/2</answer>", "\\frac{1}{2}")
    assert result["revised"] == 1.0 and result["self_corrected"] == 1.0 and result["score"] == 1.0


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(-50, 50), st.sampled_from([1, 2, 4, 5, 8, 10, 20, 25]), st.integers(1, 9))
def test_property_fraction_forms_are_equivalent_and_other_values_are_not(numerator, denominator, shift):
    value = fractions.Fraction(numerator, denominator)
    gold = f"\\frac{{{value.numerator}}}{{{value.denominator}}}" if value.denominator != 1 else str(value.numerator)
    decimal = format(float(value), "g")
    for form in (f"{value.numerator}/{value.denominator}", decimal, f"\\boxed{{{gold}}}"):
        assert score(f"<answer>{form}</answer>", gold)["score"] == 1.0, (form, gold)
    other = value + fractions.Fraction(shift, 7)
    assert score(f"<answer>{other.numerator}/{other.denominator}</answer>", gold)["score"] == 0.0


def test_validate_accepts_a_math_run_config(data):
    config = OmegaConf.create(
        {
            "reasoning_gym": section(data, gsm8k=gsm8k(data), math=math(data)),
            "actor_rollout_ref": {"model": {"path": "Qwen/Qwen2.5-7B-Instruct"}},
        }
    )
    settings = validate(config)
    assert set(settings.datasets) == {"gsm8k", "math"}
    check_sources(settings)


# --- utils/download_math_data.py --------------------------------------------------------------------


def load_script(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, REPO / "utils" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_download_script_writes_the_files_the_math_configs_read(monkeypatch, tmp_path):
    import datasets

    from tests.math_fixtures import MATH_ROWS

    calls = []

    def fake_load_dataset(path, name=None, split=None):
        calls.append((path, name, split))
        gsm8k_rows, math_rows = (GSM8K_ROWS, MATH_ROWS) if split == "train" else (GSM8K_TEST_ROWS, MATH_TEST_ROWS)
        rows = gsm8k_rows if path == "openai/gsm8k" else [r for r in math_rows if r["type"].lower() == name]
        return datasets.Dataset.from_list(rows or [{**math_rows[0], "type": name}])

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    script = load_script("download_math_data")
    assert script.main(["--out", str(tmp_path / "data")]) == 0
    assert ("openai/gsm8k", "main", "test") in calls and ("EleutherAI/hendrycks_math", "precalculus", "train") in calls
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()) == [
        "data/gsm8k/test.parquet",
        "data/gsm8k/train.parquet",
        "data/math/test.jsonl",
        "data/math/train.jsonl",
    ]
    settings = checked(
        {
            "datasets": {
                "gsm8k": gsm8k(tmp_path / "data"),
                "math": {
                    "source": {
                        "format": "math",
                        "train": str(tmp_path / "data/math/train.jsonl"),
                        "val": str(tmp_path / "data/math/test.jsonl"),
                    }
                },
            }
        }
    )
    assert set(settings.datasets) == {"gsm8k", "math"}


def test_download_script_fails_in_one_line_without_a_hub(monkeypatch, tmp_path, capsys):
    import datasets

    def offline(*args, **kwargs):
        raise ConnectionError("no route to huggingface.co")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    assert load_script("download_math_data").main(["--out", str(tmp_path)]) == 1
    assert "could not download from the Hugging Face hub: no route" in capsys.readouterr().err
    assert not any(tmp_path.rglob("*.parquet"))


# --- row order, bad rows, blank cells ---------------------------------------------------------------


def test_a_split_shorter_than_a_sorted_file_draws_from_all_of_it(tmp_path):
    # MATH files come sorted by subject: the first rows are all algebra
    rows = [
        {
            "problem": f"p{i}",
            "solution": f"\\boxed{{{i}}}",
            "level": "Level 1",
            "type": "Algebra" if i < 50 else "Geometry",
        }
        for i in range(100)
    ]
    path = write_jsonl(tmp_path / "sorted.jsonl", rows)
    spec = {"source": {"format": "math", "val": str(path)}}
    val = dataset("val", {"math": spec}, val_size=20)
    types = [val[i]["extra_info"]["entry"]["metadata"]["type"] for i in range(20)]
    assert 5 <= types.count("Geometry") <= 15
    # n items are the n rows, each once, and the order is a function of the seed
    whole = dataset("val", {"math": spec}, val_size=100)
    assert sorted(whole[i]["extra_info"]["entry"]["metadata"]["row"] for i in range(100)) == list(range(100))
    again = dataset("val", {"math": spec}, val_size=100)
    other_seed = dataset("val", {"math": spec}, val_size=100, seed=7)
    order = [whole[i]["raw_prompt"] for i in range(100)]
    assert order == [again[i]["raw_prompt"] for i in range(100)] != [other_seed[i]["raw_prompt"] for i in range(100)]


@pytest.mark.parametrize(
    "bad_row, match",
    [
        ({"question": "q"}, r"bad\.jsonl: row 2 has no column 'answer' for format 'gsm8k'"),
        (["q", "a"], r"bad\.jsonl: row 2 is list, not a record of named columns"),
    ],
)
def test_a_bad_row_anywhere_is_named(tmp_path, bad_row, match):
    path = write_jsonl(tmp_path / "bad.jsonl", [*GSM8K_ROWS[:2], bad_row])
    with pytest.raises(ConfigError, match=match):
        checked({"datasets": {"g": {"source": {"format": "gsm8k", "train": str(path)}}}}, splits=("train",))


def test_rows_with_blank_cells_are_skipped(tmp_path):
    rows = [
        *GSM8K_ROWS[:1],
        {"question": None, "answer": "#### 3"},
        {"question": "   ", "answer": "#### 3"},
        {"question": "q", "answer": "work ####  "},
        {"question": "q", "answer": None},
    ]
    path = write_jsonl(tmp_path / "blank.jsonl", rows)
    spec = {"source": {"format": "gsm8k", "train": str(path), "val": str(path)}}
    train = dataset("train", {"gsm8k": spec}, train_size=3)
    assert {train[i]["reward_model"]["ground_truth"] for i in range(3)} == {"72"}
    math_rows = [{"problem": None, "solution": "\\boxed{1}", "level": 1.0, "type": "Algebra"}, *MATH_ROWS[:1]]
    path = write_jsonl(tmp_path / "math.jsonl", math_rows)
    spec = {"source": {"format": "math", "train": str(path), "val": str(path)}, "config": {"max_level": 1}}
    train = dataset("train", {"math": spec}, train_size=2)
    assert {train[i]["raw_prompt"][-1]["content"] for i in range(2)} == {MATH_ROWS[0]["problem"]}


def test_a_float_level_column_is_read_as_levels(tmp_path):
    rows = [{**row, "level": float(i + 1)} for i, row in enumerate(MATH_ROWS[:5])]
    path = write_jsonl(tmp_path / "floats.jsonl", rows)
    spec = {"source": {"format": "math", "train": str(path), "val": str(path)}, "config": {"max_level": 2}}
    train = dataset("train", {"math": spec}, train_size=4)
    assert {train[i]["extra_info"]["entry"]["metadata"]["level"] for i in range(4)} == {1, 2}


def test_a_home_relative_path_is_expanded(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    write_parquet(tmp_path / "g.parquet", GSM8K_ROWS)
    spec = {"source": {"format": "gsm8k", "train": "~/g.parquet", "val": "~/g.parquet"}}
    assert len(dataset("train", {"gsm8k": spec}, train_size=4)) == 4


def test_a_curriculum_that_can_reach_a_level_without_rows_is_refused(data):
    # only levels 3-5 are Algebra or Geometry with types [Geometry]: level 4 only
    spec = math(data, {"types": ["Geometry"]})
    section = {"datasets": {"math": spec}, "curriculum": {"enabled": True, "levels": {"math": {"max_level": 4}}}}
    settings = ReasoningGymConfig.from_section(section)
    with pytest.raises(
        ConfigError,
        match=r"^reasoning_gym\.curriculum\.levels\.math: no training row has a level <= 1.*"
        r"raise the dataset's config\.min_level",
    ):
        check_sources(settings)
    check_sources(settings, splits=("val",))  # the curriculum follows the training split only
    spec = math(data, {"types": ["Geometry"], "min_level": 4})
    section["datasets"]["math"] = spec
    assert checked(section).curriculum.levels == {"math": {"max_level": 4}}


# --- held out: a validation or evaluation row is never a training question ----------------------------


def apples(i: int) -> str:
    return f"Ann has {i} apples and is given {i} more. How many apples does she have now?"


def layout_row(layout: str, i: int, question: str) -> dict:
    """A row of ``layout`` whose question is ``question`` and whose answer is ``2 * i``."""
    if layout == "gsm8k":
        return {"question": question, "answer": f"{i} + {i} = {2 * i}\n#### {2 * i}"}
    return {"problem": question, "solution": f"$\\boxed{{{2 * i}}}$", "level": f"Level {i % 5 + 1}", "type": "Algebra"}


def held_out_files(tmp_path, layout: str, train_rows: list[int] | None = None):
    """A training parquet and a validation jsonl of ``layout``: 10 validation rows, of which the questions
    of rows 0 to 2 are also in the training file (row 2's with other whitespace), beside 10 training rows
    of their own. Returns the two paths."""
    val = [layout_row(layout, i, apples(i)) for i in range(10)]
    val[2][FORMATS[layout].columns[0]] = "  " + apples(2).replace(" and ", "\n and\t") + " \n"
    order = train_rows if train_rows is not None else [0, 1, 2, *range(100, 110)]
    train = [layout_row(layout, i + 1, apples(i)) for i in order]  # the same questions, other answers
    return write_parquet(tmp_path / "train.parquet", train), write_jsonl(tmp_path / "val.jsonl", val)


def source_of(layout: str, **files) -> FileSource:
    return FileSource(layout, {split: str(path) for split, path in files.items()})


@pytest.mark.parametrize("layout", ["gsm8k", "math"])
def test_validation_and_evaluation_leave_out_the_training_questions_and_say_how_many(tmp_path, caplog, layout):
    train, val = held_out_files(tmp_path, layout)
    source = source_of(layout, train=train, val=val)
    with caplog.at_level(logging.INFO, logger="rg_verl.data.files"):
        validation = FileDataset("apples", source, "val")
    assert validation.dropped == 3 and len(validation) == 7
    questions = {normalise(entry["question"]) for entry in validation.entries}
    assert questions == {apples(i) for i in range(3, 10)} and not questions & training_questions(source)
    assert f"{val}: left out 3 of 10 rows whose question is also in the training file {train}" in caplog.messages
    # eval defaults to the val file, and is filtered alike; so is an eval file of its own
    evaluation = FileDataset("apples", source, "eval")
    assert evaluation.dropped == 3 and evaluation.entries == validation.entries
    evaluation = FileDataset("apples", source_of(layout, train=train, eval=val), "eval")
    assert evaluation.dropped == 3 and evaluation.entries == validation.entries
    # training is never filtered, and a source without a training file has nothing to leave out
    caplog.clear()
    training = FileDataset("apples", source_of(layout, train=train, val=val), "train")
    assert training.dropped == 0 and len(training) == 13 and not caplog.messages
    alone = FileDataset("apples", source_of(layout, val=val), "val")
    assert alone.dropped == 0 and len(alone) == 10


@pytest.mark.parametrize("layout", ["gsm8k", "math"])
def test_held_out_items_are_a_function_of_the_seed_and_the_index(tmp_path, layout):
    train, val = held_out_files(tmp_path / "a", layout)
    spec = {"source": {"format": layout, "train": str(train), "val": str(val)}}
    for split in ("val", "eval"):
        items = dataset(split, {"apples": spec}, val_size=7, eval_size=7)
        assert items.datasets["apples"].dropped == 3
        prompts = [items[i]["raw_prompt"][-1]["content"] for i in range(7)]
        # the 7 held-out rows, each once, none of them a training question
        assert sorted(map(normalise, prompts)) == sorted(apples(i) for i in range(3, 10))
        assert [items[i]["raw_prompt"] for i in range(7)] == [
            dataset(split, {"apples": spec}, val_size=7, eval_size=7)[i]["raw_prompt"] for i in range(7)
        ]
    # the training file's order (and its other rows) do not move a held-out item
    shuffled = [0, 1, 2, *range(100, 110)]
    random.Random(3).shuffle(shuffled)
    other_train, _ = held_out_files(tmp_path / "b", layout, train_rows=[*shuffled, *range(200, 205)])
    other = {"source": {"format": layout, "train": str(other_train), "val": str(val)}}
    first, second = dataset("val", {"apples": spec}, val_size=7), dataset("val", {"apples": other}, val_size=7)
    assert [first[i]["raw_prompt"] for i in range(7)] == [second[i]["raw_prompt"] for i in range(7)]


@pytest.mark.parametrize("layout", ["gsm8k", "math"])
def test_a_held_out_file_of_training_questions_only_is_refused_naming_both_files(tmp_path, layout):
    train, val = held_out_files(tmp_path, layout, train_rows=list(range(10)))
    val_re, train_re = re.escape(str(val)), re.escape(str(train))
    match = (
        rf"^{val_re}: every usable row of dataset 'apples' \(10 of 10\) has a question that is also in the "
        rf"training file {train_re}, so the val split has no item left; point source\.val at a file of other questions"
    )
    with pytest.raises(SourceError, match=match):
        FileDataset("apples", source_of(layout, train=train, val=val), "val")
    # the check before the run names the field; eval, falling back to the val file, is refused alike
    section = {"datasets": {"apples": {"source": {"format": layout, "train": str(train), "val": str(val)}}}}
    with pytest.raises(ConfigError, match=r"^reasoning_gym\.datasets\.apples\.source\.val: " + match[1:]):
        checked(section)
    with pytest.raises(ConfigError, match=rf"source\.eval: {val_re}: every usable row .* the eval split has no item"):
        checked(section, splits=("eval",))
    checked(section, splits=("train",))  # training keeps them all
    # a split pointed at the training file itself is the same mistake
    with pytest.raises(SourceError, match=rf"^{train_re}: every usable row .* in the training file {train_re}"):
        FileDataset("apples", source_of(layout, train=train, val=train), "val")


def test_a_bad_training_file_is_named_at_its_field_when_a_held_out_split_needs_it(tmp_path):
    train, val = held_out_files(tmp_path, "gsm8k")
    missing = {"format": "gsm8k", "train": str(tmp_path / "none.parquet"), "val": str(val)}
    with pytest.raises(ConfigError, match=r"^reasoning_gym\.datasets\.apples\.source\.train: .*none\.parquet' does"):
        checked({"datasets": {"apples": {"source": missing}}}, splits=("val",))
    wrong_layout = {"format": "math", "train": str(train), "eval": str(val)}
    settings = ReasoningGymConfig.from_section({"datasets": {"apples": {"source": wrong_layout}}}, where="eval")
    with pytest.raises(ConfigError, match=r"^eval\.datasets\.apples\.source\.train: .*row 0 has no column 'problem'"):
        check_sources(settings, splits=("eval",), where="eval")
