"""Tests for rg_verl.reward.extraction: the answer of a response, strict and lenient."""

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rg_verl.common.names import ANSWER_CLOSE, ANSWER_OPEN, TAGS, THINK_CLOSE, THINK_OPEN
from rg_verl.reward import extract_answer, response_answer
from tests.helpers import within

# a hang (catastrophic backtracking) fails the test after this long; linear scans take milliseconds
HANG_S = 30


@pytest.mark.parametrize(
    "text, expected",
    [
        ("<think>r</think><answer>42</answer>", "42"),
        ("  \n<think>r</think>\n\n<answer> 42 \n</answer>\n ", "42"),
        ("<think></think><answer></answer>", ""),
        ("<think>I may write <answer>1</answer></think><answer>2</answer>", "2"),
        ("<think>multi\nline</think><answer>a\nb</answer>", "a\nb"),
    ],
)
def test_strict_accepts_well_formed(text, expected):
    assert extract_answer(text, strict=True) == expected
    assert extract_answer(text, strict=False) == expected


@pytest.mark.parametrize(
    "text",
    [
        "<answer>42</answer>",  # no think block
        "preamble <think>r</think><answer>42</answer>",  # text before think
        "<think>r</think><answer>42</answer> trailing",  # text after answer
        "<think>r</think> between <answer>42</answer>",  # text between blocks
        "<think>r</think><answer>1</answer><answer>2</answer>",  # two answers
        "<think>r</think><think>s</think><answer>2</answer>",  # two thinks
        "<think><think>r</think></think><answer>2</answer>",  # nested think
        "<think>r</think><answer><answer>2</answer></answer>",  # nested answer
        "<think>r<answer>2</answer>",  # unclosed think
        "<think>r</think><answer>2",  # unclosed answer
        "<think>r</think>",
        "",
        "</answer>",
    ],
)
def test_strict_rejects_malformed(text):
    assert extract_answer(text, strict=True) is None


@pytest.mark.parametrize(
    "text, expected",
    [
        ("The answer is <answer>7</answer>.", "7"),
        ("<answer>1</answer> then <answer>2</answer> then <answer> 3 </answer>", "3"),
        ("<answer>1</answer> and an unclosed <answer>2", "1"),
        ("<answer><answer>x</answer></answer>", "x"),
        ("<answer>x <answer>y</answer>", "y"),
        ("<answer>1</answer></answer>", "1"),
        ("</answer><answer>5</answer>", "5"),
        ("<ANSWER>5</ANSWER>", None),
        ("<answer>5", None),
        ("5</answer>", None),
        ("</answer><answer>", None),
        ("no tags at all", None),
        ("", None),
    ],
)
def test_lenient(text, expected):
    assert extract_answer(text, strict=False) == expected


def test_default_is_lenient():
    assert extract_answer("x <answer>1</answer>") == "1"


def test_non_string_input():
    assert extract_answer(None, strict=False) is None
    assert extract_answer(None, strict=True) is None


@pytest.mark.parametrize(
    "text, source, strict, expected",
    [
        (r"so \boxed{5}", "math/gsm8k", False, "5"),
        (r"so \boxed{5}", "math/gsm8k", True, None),  # strict mode has no fallback
        (r"<answer>4</answer> \boxed{5}", "math/gsm8k", False, "4"),  # an answer block wins
        (r"so \boxed{5}", "reasoning_gym/chain_sum", False, None),  # only file math items fall back
    ],
)
def test_response_answer_falls_back_to_boxed_for_file_math(text, source, strict, expected):
    assert response_answer(text, source, strict=strict) == expected


# --- properties ------------------------------------------------------------------------------------

tagless_text = st.text().filter(lambda t: not any(tag in t for tag in TAGS))
# the think block may hold anything but think tags (a draft answer block is fine)
think_text = st.text().filter(lambda t: THINK_OPEN not in t and THINK_CLOSE not in t)
blank = st.text(alphabet=" \n\t", max_size=3)
tag_soup = st.lists(st.one_of(st.sampled_from([*TAGS, "<", ">", "/", "answer", "think"]), st.text(max_size=5))).map(
    "".join
)


@st.composite
def strict_responses(draw) -> tuple[str, str]:
    """(a response in the strict format, its answer), whitespace around and between the blocks."""
    answer = draw(tagless_text)
    think = draw(think_text)
    pad = [draw(blank) for _ in range(3)]
    return f"{pad[0]}{THINK_OPEN}{think}{THINK_CLOSE}{pad[1]}{ANSWER_OPEN}{answer}{ANSWER_CLOSE}{pad[2]}", answer


@given(strict_responses())
def test_property_strict_format_gives_its_answer_in_both_modes(case):
    text, answer = case
    assert extract_answer(text, strict=True) == answer.strip()
    assert extract_answer(text, strict=False) == answer.strip()


@given(tag_soup, strict_responses())
def test_property_a_final_block_wins_after_any_soup(prefix, case):
    text, answer = case
    lenient = extract_answer(prefix + text, strict=False)
    assert lenient == answer.strip()
    assert extract_answer(prefix + text, strict=True) in (None, lenient)


# an answer block exists iff some <answer> ends before some later </answer> starts
HAS_BLOCK = re.compile(re.escape(ANSWER_OPEN) + r"[\s\S]*" + re.escape(ANSWER_CLOSE))


@given(st.one_of(st.text(), tag_soup, strict_responses().map(lambda case: case[0])))
def test_property_invariants_of_any_text(text):
    lenient = extract_answer(text, strict=False)
    strict = extract_answer(text, strict=True)
    assert (lenient is None) == (HAS_BLOCK.search(text) is None)
    if lenient is not None:
        assert lenient in text and lenient == lenient.strip()
        assert ANSWER_OPEN not in lenient and ANSWER_CLOSE not in lenient
    if strict is not None:
        assert strict == lenient  # strict implies lenient, with the same answer
        assert not any(tag in strict for tag in TAGS)
        assert text.strip().startswith(THINK_OPEN) and text.strip().endswith(ANSWER_CLOSE)


@given(tagless_text, tagless_text)
def test_property_last_answer_wins(a, b):
    assert extract_answer(f"<answer>{a}</answer>{a}<answer>{b}</answer>", strict=False) == b.strip()


HOSTILE = [
    "<answer>" * 12_500,
    "</answer>" * 11_200,
    "<think>" * 14_300,
    "<think>" + "</think>" * 12_500,
    "<answer><think></answer>" * 4_200,
    "<think>" + "x" * 100_000 + "</think><answer>" + "<answer>" * 10_000,
    "<think>" + "<answer>" * 12_500 + "</think><answer>1</answer>",
    "<think>a</think><answer>" + "<answer" * 14_300 + "</answer>",
    "<" * 100_000,
    "<answer>" + " " * 100_000 + "x",
]


@pytest.mark.parametrize("strict", [False, True])
def test_hostile_long_inputs_finish(strict):
    def extract_all():
        for text in HOSTILE:
            assert len(text) >= 100_000
            extract_answer(text, strict=strict)

    within(HANG_S, extract_all)
