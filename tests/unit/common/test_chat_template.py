"""rg_verl.common.chat_template: the text a chat template opens the assistant turn with, read off the tokenizer."""

import logging

import pytest

from rg_verl.common.chat_template import AUTO, resolve_response_prefix, response_prefix
from rg_verl.cpu.tiny_model import _train_tokenizer


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory) -> dict[str, str]:
    """A plain and a thinking tiny tokenizer, saved: kind -> folder."""
    folders = {}
    for kind, thinking in (("plain", False), ("thinking", True)):
        folder = tmp_path_factory.mktemp(kind)
        _train_tokenizer(300, 0, 512, thinking_template=thinking).save_pretrained(folder)
        folders[kind] = str(folder)
    return folders


def test_a_thinking_template_opens_the_think_block_and_a_plain_one_nothing():
    assert response_prefix(_train_tokenizer(300, 0, 512)) == ""
    thinking = _train_tokenizer(300, 0, 512, thinking_template=True)
    assert response_prefix(thinking) == "<think>\n"
    # with thinking off, Qwen3's templates write an empty think block for the model
    assert response_prefix(thinking, {"enable_thinking": False}) == "<think>\n\n</think>\n\n"


def test_a_tokenizer_without_a_chat_template_has_no_prefix():
    class Bare:
        chat_template = None

    assert response_prefix(Bare()) == ""


def test_auto_reads_the_saved_tokenizer_and_an_explicit_value_wins(tokenizers):
    assert resolve_response_prefix(AUTO, tokenizers["thinking"]) == "<think>\n"
    assert resolve_response_prefix(AUTO, tokenizers["thinking"], {"enable_thinking": False}).endswith("</think>\n\n")
    assert resolve_response_prefix(AUTO, tokenizers["plain"]) == ""
    assert resolve_response_prefix("", tokenizers["thinking"]) == ""  # the override
    assert resolve_response_prefix("<think>", None) == "<think>"
    assert resolve_response_prefix(AUTO, None) == ""


def test_auto_without_a_loadable_tokenizer_warns_and_names_the_override(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="rg_verl.common.chat_template"):
        assert resolve_response_prefix(AUTO, str(tmp_path / "missing")) == ""
    assert "Set response_prefix" in caplog.text


def test_the_runs_template_arguments_reach_verls_prompt_and_the_rewards_prefix(tokenizers):
    """verl's agent loop builds the rollout's prompt ids with data.apply_chat_template_kwargs; the reward's
    chat_template_kwargs are the same value (rg_verl_base.yaml), so auto reads the prefix that prompt ends with."""
    from hydra import compose, initialize_config_dir
    from transformers import AutoTokenizer
    from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

    from tests.helpers import REPO

    with initialize_config_dir(config_dir=str(REPO / "configs" / "smoke"), version_base=None):
        config = compose(config_name="cpu", overrides=["+data.apply_chat_template_kwargs.enable_thinking=false"])
    kwargs = dict(config.data.apply_chat_template_kwargs)
    assert dict(config.reward.custom_reward_function.reward_kwargs.chat_template_kwargs) == kwargs
    tokenizer = AutoTokenizer.from_pretrained(tokenizers["thinking"])
    builder = create_continuous_token_builder(tokenizer, chat_template_kwargs=kwargs)
    prompt = tokenizer.decode(builder.build_initial_tokens([{"role": "user", "content": "q"}]))
    prefix = resolve_response_prefix(AUTO, tokenizers["thinking"], kwargs)
    assert prefix == "<think>\n\n</think>\n\n" and prompt.endswith("assistant\n" + prefix)
