"""Extra reward terms: each term's value on a table of responses, and their use in compute_score."""

import pytest
import reasoning_gym
from hypothesis import given, settings
from hypothesis import strategies as st

from rg_verl.reward import compute_score
from rg_verl.reward.score import count_tokens
from rg_verl.reward.terms import TERMS, Response, clamp_unit, revised_answers


def response(correctness=0.0, format_ok=False, num_tokens=0, max_tokens=100, earlier=(), text=""):
    return Response(text, correctness, format_ok, num_tokens, max_tokens, tuple(earlier))


@pytest.mark.parametrize(
    "term, case, expected",
    [
        ("format", response(format_ok=True), 1.0),
        ("format", response(format_ok=False, correctness=1.0), 0.0),
        ("length", response(num_tokens=0), 0.0),
        ("length", response(num_tokens=25), -0.25),
        ("length", response(num_tokens=100), -1.0),
        ("length", response(num_tokens=400), -1.0),  # clamped
        ("cosine", response(correctness=1.0, num_tokens=0), 1.0),
        ("cosine", response(correctness=1.0, num_tokens=50), 0.75),
        ("cosine", response(correctness=1.0, num_tokens=100), 0.5),
        ("cosine", response(correctness=1.0, num_tokens=900), 0.5),  # clamped
        ("cosine", response(correctness=0.0, num_tokens=0), -1.0),
        ("cosine", response(correctness=0.0, num_tokens=50), -0.75),
        ("cosine", response(correctness=0.5, num_tokens=100), -0.5),  # partial credit is not correct
        ("self_correction", response(correctness=1.0, earlier=[False]), 1.0),
        ("self_correction", response(correctness=1.0, earlier=[True, False]), 1.0),
        ("self_correction", response(correctness=1.0, earlier=[True]), 0.0),  # was right already
        ("self_correction", response(correctness=0.0, earlier=[False]), 0.0),  # ended wrong
        ("self_correction", response(correctness=1.0), 0.0),  # never revised
    ],
)
def test_term_values(term, case, expected):
    assert TERMS[term](case) == pytest.approx(expected)


@given(
    st.sampled_from(sorted(TERMS)),
    st.floats(0, 1),
    st.booleans(),
    st.integers(0, 10**6),
    st.integers(0, 10**5),
    st.lists(st.booleans(), max_size=4),
)
def test_terms_stay_in_range(term, correctness, format_ok, num_tokens, max_tokens, earlier):
    value = TERMS[term](response(correctness, format_ok, num_tokens, max_tokens, earlier))
    assert -1.0 <= value <= 1.0


@pytest.mark.parametrize(
    "text, expected",
    [
        ("no answers", []),
        ("<answer>4</answer>", ["4"]),
        ("<answer> 3 </answer> no wait <answer>4</answer>", ["3", "4"]),
        ("<answer>3</answer><answer>unclosed", ["3"]),
        ("</answer><answer>x</answer>", ["x"]),
    ],
)
def test_revised_answers(text, expected):
    assert revised_answers(text) == expected


@pytest.mark.parametrize(
    "value, expected",
    [(0.25, 0.25), (0.0, 0.0), (1.0, 1.0), (1.5, 1.0), (-0.5, 0.0), (float("nan"), 0.0), (float("inf"), 0.0)],
)
def test_clamp_unit(value, expected):
    assert clamp_unit(value) == expected


@given(st.floats(0.0, 1.0))
def test_clamp_unit_keeps_the_unit_interval(value):
    assert clamp_unit(value) == value


# --- in compute_score ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def entry():
    return reasoning_gym.create_dataset("chain_sum", seed=3, size=1)[0]


def score(entry, text, **kwargs):
    return compute_score("reasoning_gym/chain_sum", text, entry["answer"], {"entry": entry}, **kwargs)


def test_terms_are_weighted_and_reported(entry):
    text = f"<think>t</think><answer>{entry['answer']}</answer>"
    result = score(entry, text, terms={"format": 0.5, "self_correction": 0.0})
    assert result["term/format"] == 1.0 and "term/self_correction" not in result  # weight 0 is off
    assert result["score"] == pytest.approx(1.0 + 0.5)


def test_self_correction_is_detected_and_rewarded(entry):
    wrong = str(int(entry["answer"]) + 1)
    text = f"<answer>{wrong}</answer> wait, recheck: <answer>{entry['answer']}</answer>"
    result = score(entry, text, terms={"self_correction": 0.2})
    assert result["revised"] == 1.0 and result["self_corrected"] == 1.0
    assert result["score"] == pytest.approx(1.2)
    repeated = score(entry, f"<answer>{entry['answer']}</answer><answer>{entry['answer']}</answer>")
    assert repeated["revised"] == 0.0 and repeated["self_corrected"] == 0.0


def test_strict_and_lenient_are_both_reported(entry):
    text = f"Answer: <answer>{entry['answer']}</answer>"
    lenient = score(entry, text)
    strict = score(entry, text, mode="strict")
    assert lenient["correct_strict"] == strict["correct_strict"] == 0.0
    assert lenient["correct_lenient"] == strict["correct_lenient"] == 1.0
    assert lenient["score"] == 1.0 and strict["score"] == 0.0


def test_length_terms_count_tokens(entry, tmp_path_factory):
    from rg_verl.cpu.tiny_model import build_tiny_model

    tokenizer = build_tiny_model(tmp_path_factory.mktemp("tok") / "model")
    text = f"<think>{'abc ' * 20}</think><answer>{entry['answer']}</answer>"
    result = score(
        entry, text, terms={"length": 1.0, "cosine": 1.0}, tokenizer_path=str(tokenizer), max_response_length=512
    )
    assert 20 < result["response_tokens"] < 512
    assert result["term/length"] == pytest.approx(-result["response_tokens"] / 512)
    assert 0.5 < result["term/cosine"] < 1.0
    huge = score(entry, "x" * 1_000_000, terms={"length": 1.0}, tokenizer_path=str(tokenizer), max_response_length=512)
    assert huge["term/length"] == -1.0


@pytest.fixture(scope="module")
def tokenizer_path(tmp_path_factory):
    from rg_verl.cpu.tiny_model import build_tiny_model

    return str(build_tiny_model(tmp_path_factory.mktemp("tok") / "model"))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.text(max_size=60) | st.just("x" * 5000), max_size=6))
def test_counting_many_texts_at_once_equals_counting_each(tokenizer_path, texts):
    """count_tokens in one call gives each text's count alone (the long ones capped at the budget)."""
    batched = count_tokens(texts, tokenizer_path, 100)
    assert batched == [count_tokens([text], tokenizer_path, 100)[0] for text in texts]
    assert all(count == 100 for count, text in zip(batched, texts, strict=True) if len(text) == 5000)


def test_a_given_token_count_replaces_the_reward_s_own(entry, tokenizer_path):
    text = f"<think>{'abc ' * 20}</think><answer>{entry['answer']}</answer>"
    kwargs = {"terms": {"length": 1.0}, "tokenizer_path": tokenizer_path, "max_response_length": 512}
    counted = score(entry, text, **kwargs)
    assert score(entry, text, response_tokens=int(counted["response_tokens"]), **kwargs) == counted
    given_count = score(entry, text, response_tokens=256, **kwargs)
    assert given_count["response_tokens"] == 256 and given_count["term/length"] == pytest.approx(-0.5)


def test_bad_reward_kwargs_are_rejected(entry):
    with pytest.raises(ValueError, match="mode"):
        score(entry, "", mode="fuzzy")
    valid = "cosine, format, length, reference_cosine, reference_format, reference_length, self_correction"
    with pytest.raises(ValueError, match=f"valid terms: {valid}"):
        score(entry, "", terms={"fromat": 1.0})
    with pytest.raises(ValueError, match="finite number"):
        score(entry, "", terms={"format": "high"})
    with pytest.raises(ValueError, match="tokenizer_path"):
        score(entry, "", terms={"length": 1.0})
