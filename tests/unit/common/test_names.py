"""Tests for rg_verl.common.names: the shared names, and the data sources, prompts and chats built from them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from reasoning_gym.utils import SYSTEM_PROMPTS

from rg_verl.common import names
from rg_verl.common.names import (
    ANSWER_CLOSE,
    ANSWER_OPEN,
    FILE_PREFIX,
    MAX_ATTEMPTS,
    MAX_SEED,
    MAX_SPLIT_SIZE,
    RG_PREFIX,
    SPLIT_SHARES,
    SPLIT_STRIDE,
    SPLITS,
    TAGS,
    THINK_CLOSE,
    THINK_OPEN,
    chat_messages,
    data_source,
    formatted,
    parse_data_source,
    source_name,
    system_prompt,
)
from rg_verl.reward import extract_answer

dataset_names = st.text(min_size=1, max_size=40)


@given(name=dataset_names, from_file=st.booleans())
def test_a_data_source_parses_back_to_its_name_and_kind(name, from_file):
    source = data_source(name, from_file=from_file)
    assert source.startswith(FILE_PREFIX if from_file else RG_PREFIX)
    assert parse_data_source(source) == (name, from_file)
    assert source_name(source) == name


def test_the_two_prefixes_cannot_be_confused():
    assert not RG_PREFIX.startswith(FILE_PREFIX) and not FILE_PREFIX.startswith(RG_PREFIX)
    assert parse_data_source("math/reasoning_gym/x") == ("reasoning_gym/x", True)
    assert parse_data_source("reasoning_gym/math/x") == ("math/x", False)


@given(value=st.text(max_size=40).filter(lambda v: not v.startswith((RG_PREFIX, FILE_PREFIX))))
def test_a_foreign_data_source_has_no_name(value):
    assert parse_data_source(value) is None and source_name(value) is None


@pytest.mark.parametrize(
    "value", [RG_PREFIX, FILE_PREFIX, "openai/gsm8k", "Reasoning_Gym/x", " reasoning_gym/x", None, 3, b"math/x"]
)
def test_bare_prefixes_and_other_values_are_foreign(value):
    assert parse_data_source(value) is None and source_name(value) is None


@given(think=st.text(max_size=40), answer=st.text(max_size=20))
def test_formatted_is_the_strict_format_the_reward_reads(think, answer):
    response = formatted(think, answer)
    assert response.startswith(f"{THINK_OPEN}\n") and response.endswith(ANSWER_CLOSE)
    assert response == f"{THINK_OPEN}\n{think}\n{THINK_CLOSE}\n{ANSWER_OPEN}{answer}{ANSWER_CLOSE}"
    if not any(tag in think or tag in answer for tag in TAGS):
        assert extract_answer(response, strict=True) == answer.strip()


def test_tags_are_the_four_markup_strings():
    assert TAGS == ("<think>", "</think>", "<answer>", "</answer>")
    assert names.MODES == ("strict", "lenient")


@pytest.mark.parametrize("key", sorted(SYSTEM_PROMPTS))
def test_system_prompt_resolves_every_reasoning_gym_key(key):
    assert system_prompt(key) == SYSTEM_PROMPTS[key]


def test_system_prompt_keeps_literal_text_and_none_for_none():
    assert system_prompt("Answer in one word.") == "Answer in one word."
    assert system_prompt("") is None and system_prompt(None) is None


def test_chat_messages_with_and_without_a_system_prompt():
    assert chat_messages("Be brief.", "2+2?") == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "2+2?"},
    ]
    assert chat_messages(None, "2+2?") == [{"role": "user", "content": "2+2?"}]
    assert chat_messages("", "2+2?") == [{"role": "user", "content": "2+2?"}]
    # a model without a system role gets the prompt under another one
    assert chat_messages("s", "q", system_role="user")[0] == {"role": "user", "content": "s"}
    assert chat_messages(None, 42) == [{"role": "user", "content": "42"}]  # the content is always text


def test_each_call_builds_a_fresh_chat():
    first = chat_messages("s", "q")
    first[0]["content"] = "changed"
    first.append({"role": "assistant", "content": "a"})
    assert chat_messages("s", "q") == [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]


def test_seed_spaces_hold_a_full_split_and_stay_below_numpys_limit():
    assert SPLITS == ("train", "val", "eval") and names.EVAL_SPLIT == f"{names.SPLIT_URI}eval"
    # split k of the largest base seed: its last generator seed is the largest any run uses
    largest = MAX_SEED + len(SPLITS) * SPLIT_STRIDE - 1
    assert largest < 2**32
    assert set(MAX_SPLIT_SIZE) == set(MAX_ATTEMPTS) == set(SPLIT_SHARES) == set(SPLITS)
    for split in SPLITS:
        # a dataset starts below DATASET_OFFSET_RANGE into its split; candidate a < MAX_ATTEMPTS of item
        # i < MAX_SPLIT_SIZE has seed offset + a * MAX_SPLIT_SIZE + i: all of them fit in the split's stride
        offset, attempt, index = names.DATASET_OFFSET_RANGE - 1, MAX_ATTEMPTS[split] - 1, MAX_SPLIT_SIZE[split] - 1
        last = offset + attempt * MAX_SPLIT_SIZE[split] + index
        assert last < SPLIT_STRIDE, split


def test_attempts_miss_a_question_of_the_share_rarely():
    for split, share in SPLIT_SHARES.items():
        # a question of the split's share (its mass being the share) is missed by every candidate this rarely
        assert (1 - share) ** MAX_ATTEMPTS[split] <= 1e-9, split
        assert (1 - share) ** (MAX_ATTEMPTS[split] - 1) > 1e-9, split  # the fewest attempts that do
