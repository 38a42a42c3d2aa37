"""Tests of rg_verl.evaluation.decoding: the decoding section, its checks, and the value model's files."""

from __future__ import annotations

import json
import shutil

import pytest

from rg_verl.common.schema import ConfigError
from rg_verl.evaluation.config import check_runtime, load_config, parse_config
from rg_verl.evaluation.decoding import DecodingConfig, check_value_model
from rg_verl.oreo.value_init import prepare_value_model
from tests.unit.evaluation.fakes import small_config


def test_the_default_is_plain_sampling():
    assert parse_config(small_config()).decoding == DecodingConfig()
    assert parse_config(small_config(decoding=None)).decoding.mode == "sample"


@pytest.mark.parametrize(
    ("decoding", "overrides", "message"),
    [
        ({"mode": "value_beam"}, {}, "decoding.value_model: decoding mode value_beam scores candidates"),
        ({"mode": "value_beam", "value_model": "v", "beam_width": 0}, {}, "decoding.beam_width: 0 is not an integer"),
        ({"mode": "greedy"}, {}, "decoding.mode"),
        ({"mode": "value_rerank", "value_model": "v"}, {"backend": "openai", "base_url": "http://127.0.0.1:1/v1",
                                                        "served_model_name": "m"}, "on the hf or vllm backend"),
        ({"mode": "value_rerank", "value_model": "v", "samples": 2}, {"eval_repeats": 3}, "makes at most 2; lower"),
        ({"mode": "value_beam", "value_model": "v", "step_delimiters": [""]}, {}, "decoding.step_delimiters"),
        ({"mode": "value_beam", "value_model": "v", "beams": 2}, {}, "beams"),
    ],
)
def test_bad_decoding_sections_name_the_field(decoding, overrides, message):
    with pytest.raises(ConfigError, match=message):
        parse_config(small_config(decoding=decoding, **overrides))


def test_the_command_line_replaces_decoding_fields(tmp_path):
    path = tmp_path / "eval.yaml"
    path.write_text(json.dumps(small_config(decoding={"mode": "sample", "beam_width": 5})))
    config = load_config(path, decoding={"mode": "value_beam", "value_model": "critic"})
    decoding = config.decoding
    assert (decoding.mode, decoding.value_model, decoding.beam_width) == ("value_beam", "critic", 5)
    assert load_config(path, decoding={}).decoding.mode == "sample"


@pytest.fixture(scope="module")
def value_model(tiny_model, tmp_path_factory):
    return prepare_value_model(str(tiny_model), tmp_path_factory.mktemp("value") / "critic")


def test_a_value_model_of_the_policy_passes(value_model, tiny_model):
    check_value_model(str(value_model), str(tiny_model))
    decoding = {"mode": "value_beam", "value_model": str(value_model)}
    check_runtime(parse_config(small_config(model_path=str(tiny_model), decoding=decoding)))


def test_bad_value_models_are_named_before_any_weights_load(value_model, tiny_model, tmp_path):
    with pytest.raises(ConfigError, match="has no config.json; give the folder of a converted OREO critic"):
        check_value_model(str(tmp_path / "missing"), str(tiny_model))
    copies = {}
    for name, edit in (
        ("labels", lambda c: {**c, "num_labels": 2, "id2label": {"0": "a", "1": "b"}}),
        ("vocab", lambda c: {**c, "vocab_size": c["vocab_size"] + 8}),
    ):
        copies[name] = shutil.copytree(value_model, tmp_path / name)
        config = json.loads((copies[name] / "config.json").read_text())
        (copies[name] / "config.json").write_text(json.dumps(edit(config)))
    with pytest.raises(ConfigError, match="has 2 labels; a value model has one"):
        check_value_model(str(copies["labels"]), str(tiny_model))
    with pytest.raises(ConfigError, match="its vocabulary has .* tokens, the policy's .*; use the critic trained"):
        check_value_model(str(copies["vocab"]), str(tiny_model))
    other = shutil.copytree(value_model, tmp_path / "tokenizer")
    tokenizer = json.loads((other / "tokenizer.json").read_text())
    tokenizer["added_tokens"] = tokenizer["added_tokens"][:-1]
    (other / "tokenizer.json").write_text(json.dumps(tokenizer))
    with pytest.raises(ConfigError, match="its tokenizer differs from the policy's"):
        check_value_model(str(other), str(tiny_model))
    (other / "config.json").write_text("{not json")
    with pytest.raises(ConfigError, match="cannot read it"):
        check_value_model(str(other), str(tiny_model))
