"""Tests for rg_verl.common.hf_generate: where a response ends, for the hf rollout and the hf evaluation backend."""

from __future__ import annotations

import json
from types import SimpleNamespace as NS

import pytest
from hypothesis import given
from hypothesis import strategies as st
from transformers import GenerationConfig, PretrainedConfig

from rg_verl.common.hf_generate import eos_token_ids, response_length, saved_eos_token_ids


def model(generation: object = None, config_eos: object = None) -> NS:
    """A stand-in for a ``transformers`` model: its generation config (or none) and its model config."""
    fields = {"config": PretrainedConfig(eos_token_id=config_eos)}
    if generation is not None:
        fields["generation_config"] = generation
    return NS(**fields)


@pytest.mark.parametrize(
    ("generation_eos", "config_eos", "expected"),
    [
        (5, 9, (5,)),  # the generation config wins over the model config
        ([7, 2, 7], 9, (2, 7)),  # sorted, each once
        (None, 9, (9,)),  # no id in the generation config: the model config's
        (None, [4, 3], (3, 4)),
        ([], 9, (9,)),  # an empty list names none either
        (None, None, ()),  # neither: the model generates up to its token budget
    ],
)
def test_eos_ids_of_the_generation_config_then_the_model_config(generation_eos, config_eos, expected):
    assert eos_token_ids(model(GenerationConfig(eos_token_id=generation_eos), config_eos)) == expected


def test_a_model_without_generation_config_uses_its_model_config():
    assert eos_token_ids(model(None, 9)) == (9,)
    assert eos_token_ids(model(None, None)) == ()


def test_the_tokenizers_eos_is_added_when_a_tokenizer_is_given():
    m = model(GenerationConfig(eos_token_id=[5, 2]), 9)
    assert eos_token_ids(m, NS(eos_token_id=7)) == (2, 5, 7)
    assert eos_token_ids(m, NS(eos_token_id=5)) == (2, 5)  # already there: once
    assert eos_token_ids(m, NS(eos_token_id=None)) == (2, 5)
    assert eos_token_ids(model(None, None), NS(eos_token_id=7)) == (7,)
    assert eos_token_ids(m) == (2, 5)  # without a tokenizer, the model's ids only


def test_eos_ids_of_a_real_tiny_model(tmp_path):
    """The tiny model: its end-of-turn token ends a response, for both generators."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rg_verl.cpu.tiny_model import build_tiny_model

    path = build_tiny_model(tmp_path / "m", hidden_size=32, num_layers=1)
    tok = AutoTokenizer.from_pretrained(path)
    loaded = AutoModelForCausalLM.from_pretrained(path)
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    assert eos_token_ids(loaded) == (im_end,) and eos_token_ids(loaded, tok) == (im_end,)
    assert tok.pad_token_id not in eos_token_ids(loaded, tok)


EOS, PAD = 2, 0


@pytest.mark.parametrize(
    ("tokens", "expected"),
    [
        ([5, 7, EOS], 3),  # ends with its EOS: counted
        ([5, 7, EOS, PAD, PAD], 3),  # a finished row padded to the batch's longest
        ([5, EOS, 9, EOS], 2),  # the first EOS ends it
        ([5, 7], 2),  # no EOS: cut at the token budget, every token is response
        ([EOS], 1),
        ([], 0),
        ([5, PAD, 7], 3),  # pad inside a row is no end when pad is not an EOS id
    ],
)
def test_response_length(tokens, expected):
    assert response_length(tokens, {EOS}) == expected


def test_response_length_when_pad_is_an_eos_id():
    """Models often pad with their EOS token: the first one still ends the response."""
    assert response_length([5, EOS, EOS, EOS], {EOS}) == 2
    assert response_length([5, 7, 3, 3], (EOS, 3)) == 3  # any collection of ids


@given(
    tokens=st.lists(st.integers(0, 20), max_size=30),
    eos_ids=st.frozensets(st.integers(0, 20), max_size=3),
)
def test_the_response_is_the_tokens_up_to_and_including_the_first_eos(tokens, eos_ids):
    n = response_length(tokens, eos_ids)
    assert 0 <= n <= len(tokens) and (n > 0 or not tokens)
    assert not eos_ids.intersection(tokens[: n - 1])  # no EOS before the last token of the response
    if eos_ids.intersection(tokens):
        assert tokens[n - 1] in eos_ids  # it ends with the first EOS
    else:
        assert n == len(tokens)  # no EOS: every token is response


def test_saved_eos_ids_read_from_the_folder_equal_the_loaded_models(tmp_path):
    """Without loading weights: the generation config's ids, else the model config's, else the tokenizer's."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rg_verl.cpu.tiny_model import build_tiny_model

    path = build_tiny_model(tmp_path / "m", hidden_size=32, num_layers=1)
    tok = AutoTokenizer.from_pretrained(path)
    assert saved_eos_token_ids(str(path), tok) == eos_token_ids(AutoModelForCausalLM.from_pretrained(path), tok)
    (path / "generation_config.json").unlink()
    config = json.loads((path / "config.json").read_text())
    config["eos_token_id"] = 3
    (path / "config.json").write_text(json.dumps(config))
    assert saved_eos_token_ids(str(path)) == (3,)
    tokenizer_only = tmp_path / "served"
    tok.save_pretrained(tokenizer_only)
    assert saved_eos_token_ids(str(tokenizer_only), tok) == (tok.eos_token_id,)
