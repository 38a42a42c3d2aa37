"""The reference_* terms: reasoning-gym's training rewards, each value worked out by hand from its definition.

The definitions (rg_verl.reward.terms): with L the response length in characters and c its correctness,

- reference_cosine = long + 0.5 * (short - long) * (1 + cos(pi * L / 1000)), (short, long) = (1.0, 0.95)
  when c == 1.0, else (0.0, 0.7);
- reference_length = (1 - c) * min(L / max_output_length, 1);
- reference_format = 1 for one think block then one answer block at the start, no nested tags.
"""

import math
import re
import time

import pytest
import reasoning_gym
from hypothesis import given, settings
from hypothesis import strategies as st

from rg_verl.common.names import TAGS
from rg_verl.common.schema import ConfigError
from rg_verl.reward import compute_score
from rg_verl.reward.config import ReferenceTermsConfig, RewardConfig
from rg_verl.reward.terms import TERMS, Response, reference_format_ok

REFERENCE_TERMS = ("reference_format", "reference_length", "reference_cosine")
SQRT_HALF = math.sqrt(0.5)


def response(text="", correctness=0.0, max_output_length=1024, preappend=False):
    """A response as the reference terms see it (no tokens: they count characters)."""
    return Response(
        text, correctness, format_ok=False, num_tokens=0, max_tokens=0,
        max_output_length=max_output_length, preappend_thinking_token=preappend,
    )  # fmt: skip


def chars(n):
    return "x" * n


def fit(head, tail, n):
    """``head + filler + tail``, exactly ``n`` characters long."""
    assert len(head) + len(tail) <= n
    return head + chars(n - len(head) - len(tail)) + tail


# --- reference_cosine ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "length, correctness, expected",
    [
        # correct (c == 1.0): 0.95 + 0.5 * 0.05 * (1 + cos(pi * L / 1000)) = 0.95 + 0.025 * (1 + cos)
        (0, 1.0, 1.0),  # cos 0 = 1: 0.95 + 0.025 * 2
        (500, 1.0, 0.975),  # cos(pi/2) = 0: 0.95 + 0.025
        (1000, 1.0, 0.95),  # cos(pi) = -1: 0.95 + 0
        (250, 1.0, 0.95 + 0.025 * (1 + SQRT_HALF)),  # cos(pi/4) = sqrt(1/2): 0.992678
        # wrong: 0.7 + 0.5 * (0.0 - 0.7) * (1 + cos) = 0.7 - 0.35 * (1 + cos)
        (0, 0.0, 0.0),  # 0.7 - 0.35 * 2
        (500, 0.0, 0.35),  # 0.7 - 0.35
        (1000, 0.0, 0.7),  # 0.7 - 0
        (250, 0.0, 0.7 - 0.35 * (1 + SQRT_HALF)),  # 0.102513
        # partial credit is not correct (the reference tests c == 1.0): the wrong branch
        (1000, 0.5, 0.7),
        (500, 0.99, 0.35),
    ],
)
def test_reference_cosine_values(length, correctness, expected):
    assert TERMS["reference_cosine"](response(chars(length), correctness)) == pytest.approx(expected)


@pytest.mark.parametrize(
    "length, correctness, expected",
    [
        # progress is not clamped: the cosine keeps turning past 1000 characters, period 2000
        (1500, 0.0, 0.35),  # cos(1.5 pi) = 0: 0.7 - 0.35
        (2000, 0.0, 0.0),  # cos(2 pi) = 1: back to the empty response's 0.0
        (3000, 0.0, 0.7),  # cos(3 pi) = -1: 0.7 again
        (2000, 1.0, 1.0),  # cos(2 pi) = 1: 0.95 + 0.025 * 2, like an empty correct response
        (1500, 1.0, 0.975),  # cos(1.5 pi) = 0: 0.95 + 0.025
        (2250, 0.0, 0.7 - 0.35 * (1 + SQRT_HALF)),  # cos(2.25 pi) = cos(pi/4): as at 250 characters
    ],
)
def test_reference_cosine_oscillates_past_1000_characters(length, correctness, expected):
    assert TERMS["reference_cosine"](response(chars(length), correctness)) == pytest.approx(expected)


def test_reference_cosine_is_not_monotone_past_its_length():
    """A wrong answer of 1999 characters earns less than one of 1000: the reference's schedule, kept."""
    cosine = TERMS["reference_cosine"]
    assert cosine(response(chars(1999))) < cosine(response(chars(1000)))


# --- reference_length ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "length, correctness, max_output_length, expected",
    [
        (0, 0.0, 1024, 0.0),  # (1 - 0) * 0 / 1024
        (512, 0.0, 1024, 0.5),  # (1 - 0) * 512 / 1024
        (1024, 0.0, 1024, 1.0),  # (1 - 0) * 1
        (4096, 0.0, 1024, 1.0),  # (1 - 0) * min(4, 1): capped
        (512, 1.0, 1024, 0.0),  # (1 - 1) * 0.5: a correct answer earns nothing whatever its length
        (256, 0.25, 1024, 0.1875),  # partial: (1 - 0.25) * 256 / 1024 = 0.75 * 0.25
        (300, 0.6, 1024, 0.4 * 300 / 1024),  # partial: 0.4 * 0.29296875 = 0.1171875
        (50, 0.5, 100, 0.25),  # max_output_length 100: (1 - 0.5) * 50 / 100
        (5000, 0.5, 100, 0.5),  # (1 - 0.5) * min(50, 1)
    ],
)
def test_reference_length_values(length, correctness, max_output_length, expected):
    value = TERMS["reference_length"](response(chars(length), correctness, max_output_length))
    assert value == pytest.approx(expected)


# --- reference_format ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("<think>a</think><answer>4</answer>", True),
        ("  \n<think>a</think>\n\n<answer>4</answer>", True),  # whitespace before and between
        ("<think>a</think><answer>4</answer> trailing text", True),  # a prefix match
        ("<think>a</think><answer>4</answer><think>", True),  # an unclosed tag after is no block
        ("<think>a</think></think><answer>4</answer>", True),  # a stray closing tag inside the prefix
        ("<think></think><answer></answer>", True),  # empty blocks
        ("\u2003<think>a</think>\x1c<answer>4</answer>", True),  # Unicode whitespace, as regex \s
        ("x<think>a</think><answer>4</answer>", False),  # text before the think block
        ("<answer>4</answer>", False),  # no think block
        ("<think>a</think>b<answer>4</answer>", False),  # text between the blocks
        ("<think>a</think><answer>4", False),  # unclosed answer
        ("<think>a</think><answer>4</answer><answer>5</answer>", False),  # two answer blocks
        ("<think>a</think><answer>4</answer><think>b</think>", False),  # two think blocks
        ("<think>a<think>b</think><answer>4</answer>", False),  # <think> nested in the think block
        ("<think>a<answer>b</think><answer>4</answer>", False),  # <answer> inside the think block
        ("<think>a</think><answer><think>4</answer>", False),  # <think> inside the answer block
        ("<think>a</think><answer><answer>4</answer>", False),  # <answer> nested in the answer block
        ("", False),
        ("a</think><answer>4</answer>", False),  # the opening tag is missing (no preappend)
    ],
)
def test_reference_format_values(text, expected):
    assert reference_format_ok(text) is expected
    assert TERMS["reference_format"](response(text)) == float(expected)


@pytest.mark.parametrize(
    "text, plain, preappended",
    [
        ("a</think><answer>4</answer>", 0.0, 1.0),  # the prompt ended in <think>: the response holds the rest
        ("<think>a</think><answer>4</answer>", 1.0, 0.0),  # "<think><think>a…": nested, rejected
        ("\n a</think><answer>4</answer>", 0.0, 1.0),  # whitespace right after the prepended tag
        ("</think><answer>4</answer>", 0.0, 1.0),  # an empty think block
    ],
)
def test_reference_format_with_preappend_thinking_token(text, plain, preappended):
    assert TERMS["reference_format"](response(text)) == plain
    assert TERMS["reference_format"](response(text, preappend=True)) == preappended


def oracle_format_ok(text: str) -> bool:
    """The reference's rule as regular expressions: the prefix pattern, one block of each, no nesting."""
    if re.match(r"\s*<think>.*?</think>\s*<answer>.*?</answer>", text, re.DOTALL) is None:
        return False
    thinks = re.findall(r"<think>(.*?)</think>", text, re.DOTALL)
    answers = re.findall(r"<answer>(.*?)</answer>", text, re.DOTALL)
    if len(thinks) != 1 or len(answers) != 1:
        return False
    return not any(tag in block for block in (thinks[0], answers[0]) for tag in ("<think>", "<answer>"))


# responses made of tags, broken tags, whitespace (Unicode too) and a little text
tag_soup = st.lists(
    st.sampled_from([*TAGS, *TAGS, "<", ">", "/", "think", "answer", " ", "\n", "\t", "\u2003", "\x1c", "\x85", "4"]),
    max_size=24,
).map("".join)


@settings(max_examples=400, deadline=None)
@given(st.one_of(tag_soup, st.text(max_size=40)), st.booleans())
def test_reference_format_agrees_with_the_regular_expressions(text, preappend):
    expected = oracle_format_ok("<think>" + text if preappend else text)
    assert reference_format_ok(text, preappend_thinking_token=preappend) is expected


def test_reference_format_is_linear_on_repeated_tags():
    """A regex backtracks quadratically on repeated ``</think><answer>`` (minutes at this length); the rule
    takes milliseconds, and agrees with the regular expressions on shorter texts of the same shape."""
    text = "<think>" + "</think><answer>" * 50_000  # 800k characters
    started = time.perf_counter()
    assert reference_format_ok(text) is False  # no </answer> at all
    assert reference_format_ok(text + "</answer>") is False  # the answer block holds <answer>: nested
    assert reference_format_ok("<think>" + "</think>" * 50_000 + "<answer>4</answer>") is True
    assert time.perf_counter() - started < 2.0
    for repeat in (1, 2, 5):
        short = "<think>" + "</think><answer>" * repeat
        for candidate in (short, short + "</answer>", "<think>" + "</think>" * repeat + "<answer>4</answer>"):
            assert reference_format_ok(candidate) is oracle_format_ok(candidate)


# --- ranges, on any response -----------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(tag_soup, st.text(max_size=3000), st.integers(0, 6000).map(chars)),
    st.floats(0.0, 1.0),
    st.integers(1, 10**9),
    st.booleans(),
)
def test_reference_terms_stay_in_their_ranges(text, correctness, max_output_length, preappend):
    case = response(text, correctness, max_output_length, preappend)
    assert 0.0 <= TERMS["reference_cosine"](case) * 1.0 <= 1.0
    assert 0.0 <= TERMS["reference_length"](case) <= 1.0
    assert TERMS["reference_format"](case) in (0.0, 1.0)


def test_response_defaults_are_the_configs():
    """A Response built without options scores as the default config does."""
    defaults, options = Response("", 0.0, False, 0, 0), ReferenceTermsConfig()
    assert defaults.max_output_length == options.max_output_length == 1024
    assert defaults.preappend_thinking_token is options.preappend_thinking_token is False


# --- through compute_score -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def entry():
    return reasoning_gym.create_dataset("chain_sum", seed=3, size=1)[0]


def score(entry, text, name="chain_sum", **kwargs):
    return compute_score(f"reasoning_gym/{name}", text, entry["answer"], {"entry": entry}, **kwargs)


def test_intra_domain_weights_cosine_and_format(entry):
    """reference_cosine 0.3 + reference_format 0.2, no tokenizer needed."""
    weights = {"reference_cosine": 0.3, "reference_format": 0.2}
    right = fit("<think>", f"</think><answer>{entry['answer']}</answer>", 1000)
    result = score(entry, right, terms=weights)
    # correct, 1000 characters: cosine 0.95, format 1: 1 + 0.3 * 0.95 + 0.2 * 1 = 1.485
    assert result["term/reference_cosine"] == pytest.approx(0.95) and result["term/reference_format"] == 1.0
    assert result["score"] == pytest.approx(1.485)
    wrong = fit("<think>", f"</think><answer>{int(entry['answer']) + 1}</answer>", 500)
    result = score(entry, wrong, terms=weights)
    # wrong, 500 characters: cosine 0.35, format 1: 0 + 0.3 * 0.35 + 0.2 * 1 = 0.305
    assert result["score"] == pytest.approx(0.305)
    assert "response_tokens" not in result  # nothing was tokenised


def test_inter_domain_weights_format_and_length(entry):
    """reference_format 0.2 + reference_length 0.2; max_output_length from reference_terms."""
    weights = {"reference_format": 0.2, "reference_length": 0.2}
    wrong = fit("<think>", f"</think><answer>{int(entry['answer']) + 1}</answer>", 512)
    # wrong, 512 characters, format 1: 0 + 0.2 * 1 + 0.2 * (1 - 0) * 512 / 1024 = 0.2 + 0.1 = 0.3
    assert score(entry, wrong, terms=weights)["score"] == pytest.approx(0.3)
    capped = score(entry, wrong, terms=weights, reference_terms={"max_output_length": 256})
    # min(512 / 256, 1) = 1: 0.2 + 0.2 * 1 = 0.4
    assert capped["term/reference_length"] == 1.0 and capped["score"] == pytest.approx(0.4)
    right = fit("<think>", f"</think><answer>{entry['answer']}</answer>", 512)
    # correct: 1 + 0.2 * 1 + 0.2 * (1 - 1) * 0.5 = 1.2
    assert score(entry, right, terms=weights)["score"] == pytest.approx(1.2)


def test_correctness_follows_the_configured_mode(entry):
    """Correctness is the reward's: strict misses an answer outside the format, lenient finds it."""
    text = fit("Answer: ", f"<answer>{entry['answer']}</answer>", 500)
    weights = {"reference_cosine": 0.3, "reference_length": 0.2}
    lenient = score(entry, text, terms=weights)
    strict = score(entry, text, terms=weights, mode="strict")
    # lenient: correct; cosine 0.975 (500 chars), length (1 - 1) * ... = 0: 1 + 0.3 * 0.975 = 1.2925
    assert lenient["term/reference_cosine"] == pytest.approx(0.975) and lenient["term/reference_length"] == 0.0
    assert lenient["score"] == pytest.approx(1.2925)
    # strict: correctness 0; cosine 0.35, length 1 * 500 / 1024: 0.3 * 0.35 + 0.2 * 500 / 1024 = 0.20265625
    assert strict["term/reference_cosine"] == pytest.approx(0.35)
    assert strict["term/reference_length"] == pytest.approx(500 / 1024)
    assert strict["score"] == pytest.approx(0.105 + 0.2 * 500 / 1024)


def test_partial_correctness_scales_reference_length():
    """leg_counting gives partial credit len(answer) / len(given) to a given answer that contains it."""
    item = reasoning_gym.create_dataset("leg_counting", seed=1, size=1)[0]
    given_answer = f"{item['answer']} legs"
    correctness = len(item["answer"]) / len(given_answer)  # e.g. '292' in '292 legs': 3 / 8
    text = fit("<think>", f"</think><answer>{given_answer}</answer>", 500)
    result = score(item, text, name="leg_counting", terms={"reference_length": 1.0, "reference_cosine": 1.0})
    assert 0.0 < correctness < 1.0 and result["correct_lenient"] == pytest.approx(correctness)
    # length: (1 - c) * 500 / 1024 (for 3 / 8: 0.625 * 0.48828125 = 0.30517578125)
    assert result["term/reference_length"] == pytest.approx((1 - correctness) * 500 / 1024)
    # partial credit takes the cosine's wrong branch: 0.7 - 0.35 * (1 + cos(pi / 2)) = 0.35
    assert result["term/reference_cosine"] == pytest.approx(0.35)
    assert result["score"] == pytest.approx(correctness + (1 - correctness) * 500 / 1024 + 0.35)


def test_preappend_thinking_token_through_compute_score(entry):
    text = f"2+2</think><answer>{entry['answer']}</answer>"
    plain = score(entry, text, terms={"reference_format": 0.2})
    options = {"preappend_thinking_token": True}
    preappended = score(entry, text, terms={"reference_format": 0.2}, reference_terms=options)
    assert plain["term/reference_format"] == 0.0 and plain["score"] == 1.0  # lenient: still correct
    assert preappended["term/reference_format"] == 1.0 and preappended["score"] == pytest.approx(1.2)


@settings(max_examples=40, deadline=None)
@given(st.one_of(tag_soup, st.text(max_size=200)))
def test_property_reference_terms_never_raise(text):
    entry = {"question": "q", "answer": "12", "metadata": {}}
    weights = dict.fromkeys(REFERENCE_TERMS, 1.0)
    result = compute_score("reasoning_gym/chain_sum", text, "12", {"entry": entry}, terms=weights)
    assert all(0.0 <= result[f"term/{name}"] <= 1.0 for name in REFERENCE_TERMS)


# --- the config ------------------------------------------------------------------------------------


def test_reference_terms_need_no_tokenizer():
    config = RewardConfig.from_section({"terms": dict.fromkeys(REFERENCE_TERMS, 0.2)})
    assert config.tokenizer_path is None and config.max_response_length is None
    assert config.reference_terms == ReferenceTermsConfig(max_output_length=1024, preappend_thinking_token=False)
    with pytest.raises(ConfigError, match="set tokenizer_path and max_response_length"):
        RewardConfig.from_section({"terms": {"reference_cosine": 0.3, "cosine": 0.3}})  # ours counts tokens


def test_reference_terms_options_are_read():
    section = {"reference_terms": {"max_output_length": 4096, "preappend_thinking_token": True}}
    assert RewardConfig.from_section(section).reference_terms == ReferenceTermsConfig(4096, True)
    assert RewardConfig.from_section({"reference_terms": None}).reference_terms == ReferenceTermsConfig()


@pytest.mark.parametrize(
    "options, message",
    [
        (
            {"max_output_length": -5},
            r"reward_kwargs\.reference_terms\.max_output_length: -5 is not an integer in \[1, 1000000000\]",
        ),
        ({"max_output_length": 0}, r"reference_terms\.max_output_length: 0 is not an integer"),
        ({"max_output_length": 1.5}, r"reference_terms\.max_output_length: 1\.5 is not an integer"),
        ({"max_output_length": True}, r"reference_terms\.max_output_length: True is not an integer"),
        ({"preappend_thinking_token": "yes"}, r"reference_terms\.preappend_thinking_token: 'yes' is not true or false"),
        ({"max_output_len": 10}, r"reference_terms\.max_output_len: unknown key \(did you mean 'max_output_length'"),
    ],
)
def test_bad_reference_terms_options_name_the_field(options, message):
    with pytest.raises(ConfigError, match=message):
        RewardConfig.from_section({"reference_terms": options})


def test_bad_reference_terms_options_are_rejected_by_compute_score(entry):
    with pytest.raises(ValueError, match=r"reference_terms\.max_output_length: -1"):
        score(entry, "", terms={"reference_length": 0.2}, reference_terms={"max_output_length": -1})
    with pytest.raises(ValueError, match=r"reference_terms: expected a mapping"):
        score(entry, "", reference_terms=3)
