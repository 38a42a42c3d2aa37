"""Tests for rg_verl.reward.score: compute_score and the reward kwargs it checks."""

import dataclasses
import inspect
import logging
import math

import pytest
import reasoning_gym
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

import rg_verl.reward.score as reward_mod
from rg_verl.common.names import TAGS
from rg_verl.reward import compute_score
from rg_verl.reward.config import RewardConfig
from rg_verl.reward.score import reward_config
from tests.helpers import within

# a scoring call that takes longer than this has hung: scorers are cut off after SCORE_TIMEOUT_S,
# and the deadline leaves room for a cold start of the worker processes (up to a minute)
HANG_S = 120

tag_soup = st.lists(st.one_of(st.sampled_from([*TAGS, "<", ">", "/", "answer", "think"]), st.text(max_size=5))).map(
    "".join
)


# --- scoring -------------------------------------------------------------------------------------


def _entry(name, idx=0, **config):
    return reasoning_gym.create_dataset(name, seed=1, size=10, **config)[idx]


def _score(name, entry, response, **kwargs):
    return compute_score(f"reasoning_gym/{name}", response, entry["answer"], {"entry": entry}, **kwargs)


@pytest.mark.parametrize("name", ["chain_sum", "leg_counting", "spell_backward", "basic_arithmetic"])
def test_right_answer(name):
    entry = _entry(name)
    result = _score(name, entry, f"<think>easy</think>\n<answer>{entry['answer']}</answer>")
    assert result["score"] == result["correct_strict"] == result["correct_lenient"] == 1.0
    assert result["accuracy"] == result["format_ok"] == result["answer_found"] == 1.0


def test_wrong_answer():
    entry = _entry("chain_sum")
    wrong = str(int(entry["answer"]) + 1)
    result = _score("chain_sum", entry, f"<think>x</think><answer>{wrong}</answer>")
    assert result["score"] < 1.0 and result["accuracy"] == 0.0 and result["format_ok"] == 1.0


def test_missing_answer_scores_zero():
    entry = _entry("chain_sum")
    result = _score("chain_sum", entry, f"the answer is {entry['answer']}")
    assert result["score"] == result["accuracy"] == result["format_ok"] == result["answer_found"] == 0.0


def test_lenient_by_default_strict_on_request():
    entry = _entry("chain_sum")
    response = f"Sure! <answer>{entry['answer']}</answer>"
    lenient = _score("chain_sum", entry, response)
    assert lenient["score"] == 1.0 and lenient["format_ok"] == 0.0
    strict = _score("chain_sum", entry, response, mode="strict")
    assert strict["score"] == 0.0 and strict["format_ok"] == 0.0 and strict["answer_found"] == 0.0


def test_extra_kwargs_are_ignored():
    entry = _entry("chain_sum")
    result = _score("chain_sum", entry, f"<answer>{entry['answer']}</answer>", reward_router_address=None, foo=1)
    assert result["score"] == 1.0


def test_result_values_are_floats():
    entry = _entry("leg_counting")
    for response in ["", "<answer>3</answer>", f"<think></think><answer>{entry['answer']}</answer>"]:
        result = _score("leg_counting", entry, response)
        assert {"score", "accuracy", "format_ok", "answer_found", "correct_strict", "correct_lenient"} <= set(result)
        assert type(result.pop("pred")) is str  # the extracted answer, verl's maj@N vote
        assert all(type(v) is float for v in result.values())


def test_entry_given_as_json_string():
    import json

    entry = _entry("chain_sum")
    response = f"<answer>{entry['answer']}</answer>"
    result = compute_score("reasoning_gym/chain_sum", response, "", {"entry": json.dumps(entry)})
    assert result["score"] == 1.0


def test_missing_entry_falls_back_to_ground_truth():
    result = compute_score("reasoning_gym/chain_sum", "<answer>12</answer>", "12", {})
    assert result["score"] == 1.0
    assert compute_score("reasoning_gym/chain_sum", "<answer>12</answer>", "13", None)["score"] == 0.0


def test_arc_entry_after_json_roundtrip_scores():
    from rg_verl.data.dataset import to_json_safe

    for name in ["arc_agi", "rearc"]:
        entry = _entry(name)
        result = _score(name, to_json_safe(entry), f"<answer>{entry['answer']}</answer>")
        assert result["score"] == 1.0, name


@pytest.mark.parametrize("data_source", ["openai/gsm8k", "reasoning_gym", "", "reasoning_gym/no_such_dataset"])
def test_unknown_data_source(data_source):
    with pytest.raises(ValueError, match="data_source"):
        compute_score(data_source, "<answer>1</answer>", "1", {"entry": {}})


def test_scorer_exception_scores_zero_and_warns(monkeypatch, caplog):
    def boom(answer, entry):
        raise RuntimeError("scorer bug")

    monkeypatch.setattr(reward_mod, "_scorer", lambda name: boom)
    with caplog.at_level(logging.WARNING, logger="rg_verl.reward"):
        result = compute_score("reasoning_gym/chain_sum", "<answer>1</answer>", "1", {"entry": {"answer": "1"}})
    assert result["score"] == 0.0 and result["scoring_failed"] == 1.0
    assert "scorer bug" in caplog.text


@pytest.mark.parametrize("raw, clipped", [(1.5, 1.0), (-0.5, 0.0), (float("nan"), 0.0), (0.25, 0.25), (True, 1.0)])
def test_score_is_clipped(monkeypatch, raw, clipped):
    monkeypatch.setattr(reward_mod, "_scorer", lambda name: lambda answer, entry: raw)
    result = compute_score("reasoning_gym/chain_sum", "<answer>1</answer>", "1", {"entry": {"answer": "1"}})
    assert result["score"] == clipped and not math.isnan(result["score"])


@settings(max_examples=50, deadline=None)
@given(st.one_of(st.text(), tag_soup))
def test_property_compute_score_never_raises(text):
    entry = {"question": "q", "answer": "12", "metadata": {}}
    result = compute_score("reasoning_gym/chain_sum", text, "12", {"entry": entry})
    assert 0.0 <= result["score"] <= 1.0


def test_verl_passes_reward_kwargs():
    """verl's custom_reward_function loader forwards reward_kwargs (here mode=strict)."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo.reward import get_custom_reward_fn

    config = OmegaConf.create(
        {
            "reward": {
                "custom_reward_function": {
                    "path": "pkg://rg_verl.reward",
                    "name": "compute_score",
                    "reward_kwargs": {"mode": "strict", "chat_template_kwargs": {}},  # nested: an OmegaConf node
                }
            }
        }
    )
    fn = get_custom_reward_fn(config)
    entry = _entry("chain_sum")
    kwargs = dict(data_source="reasoning_gym/chain_sum", ground_truth=entry["answer"], extra_info={"entry": entry})
    assert fn(solution_str=f"<answer>{entry['answer']}</answer>", **kwargs)["score"] == 0.0
    assert fn(solution_str=f"<think>t</think><answer>{entry['answer']}</answer>", **kwargs)["score"] == 1.0


# --- the reward kwargs ---------------------------------------------------------------------------

REWARD_KWARGS = [field.name for field in dataclasses.fields(RewardConfig)]
ITEM = ("reasoning_gym/chain_sum", "<think>t</think><answer>12</answer>", "12", {"entry": {"answer": "12"}})


def test_reward_kwargs_take_reward_configs_defaults():
    """compute_score restates no default that could drift: each reward kwarg is None until given."""
    parameters = inspect.signature(compute_score).parameters
    assert {name: parameters[name].default for name in REWARD_KWARGS} == dict.fromkeys(REWARD_KWARGS)
    assert reward_config() == RewardConfig.from_section({})
    assert reward_config(mode=None, terms=None) == RewardConfig.from_section({})


def test_reward_kwargs_are_checked_once_per_distinct_value(monkeypatch):
    checked = []
    real = RewardConfig.from_section
    monkeypatch.setattr(RewardConfig, "from_section", lambda section, *a, **k: checked.append(section) or real(section))
    reward_mod._CHECKED.clear()
    for _ in range(3):
        assert compute_score(*ITEM, mode="strict", terms={"format": 0.5})["score"] == 1.5
    assert checked == [{"mode": "strict", "terms": {"format": 0.5}}]
    compute_score(*ITEM, mode="lenient")
    assert len(checked) == 2


def test_reward_kwargs_as_verl_passes_them():
    """verl hands the YAML's nested values over as OmegaConf nodes; the evaluator passes tuples."""
    terms = OmegaConf.create({"terms": {"format": 0.5}}).terms
    assert compute_score(*ITEM, terms=terms)["term/format"] == 1.0
    datasets = OmegaConf.create({"math_datasets": ["chain_sum"]}).math_datasets
    for math_datasets in (datasets, ("chain_sum",), ["chain_sum"]):
        assert compute_score(*ITEM, math_datasets=math_datasets)["score"] == 1.0
    empty = OmegaConf.create({"chat_template_kwargs": {}}).chat_template_kwargs
    assert compute_score(*ITEM, chat_template_kwargs=empty)["score"] == 1.0


def test_a_cached_check_keeps_equal_values_of_other_types_apart():
    """``True == 1`` in Python, but a bool weight is an error: a cached 1 must not let True through."""
    assert compute_score(*ITEM, terms={"format": 1})["term/format"] == 1.0
    with pytest.raises(ValueError, match="finite number"):
        compute_score(*ITEM, terms={"format": True})
    with pytest.raises(ValueError, match="finite number"):  # a set, which YAML cannot write
        compute_score(*ITEM, terms={"format": {0.5}})


# --- hostile answers, threads and time bounds ---------------------------------------------------


@pytest.mark.parametrize("name", ["intermediate_integration", "polynomial_multiplication"])
def test_python_power_tower_is_cut_off(name):
    entry = _entry(name)
    result = within(HANG_S, _score, name, entry, "<answer>9**9**9**9</answer>")
    assert result["score"] == 0.0 and result["scoring_failed"] == 1.0


@pytest.mark.parametrize(
    "answer",
    [
        "__import__('os').system('touch /tmp/rg_verl_pwned')",
        "open(chr(47)+chr(116)+chr(109)+chr(112)+chr(47)+chr(120), chr(119))",
        "x.__class__.__mro__",
        "eval(chr(49))",
    ],
)
def test_sympy_parsed_scorers_never_see_code(answer, monkeypatch):
    called = []
    monkeypatch.setattr(reward_mod, "call_bounded", lambda *args, **kwargs: called.append(args))
    entry = _entry("polynomial_multiplication")
    result = _score("polynomial_multiplication", entry, f"<answer>{answer}</answer>")
    assert result["score"] == 0.0 and result["scoring_failed"] == 0.0
    assert called == []  # rejected before any parsing


def test_math_datasets_use_math_verify_from_threads():
    entry = {"question": "q", "answer": "0.5", "metadata": {}}
    for answer, expected in [("1/2", 1.0), ("\\frac{1}{2}", 1.0), ("\\boxed{\\dfrac12}", 1.0), ("0.6", 0.0)]:
        result = within(
            HANG_S,
            compute_score,
            "reasoning_gym/basic_arithmetic",
            f"<answer>{answer}</answer>",
            "0.5",
            {"entry": entry},
            math_datasets=["basic_arithmetic"],
        )
        assert result["score"] == expected, answer
    hostile = within(
        HANG_S,
        compute_score,
        "reasoning_gym/basic_arithmetic",
        "<answer>\\boxed{9^{9^{9^{9}}}}</answer>",
        "1",
        {"entry": {"answer": "1"}},
        math_datasets=["basic_arithmetic"],
    )
    assert hostile["score"] == 0.0


def test_reward_works_inside_an_event_loop():
    import asyncio

    entry = _entry("polynomial_multiplication")

    async def score_in_executor():
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            None, lambda: _score("polynomial_multiplication", entry, f"<answer>{entry['answer']}</answer>")
        )

    assert asyncio.run(score_in_executor())["score"] == 1.0


@settings(max_examples=30, deadline=None)
@given(
    st.sampled_from(["polynomial_multiplication", "chain_sum", "spell_backward"]),
    st.one_of(st.text(max_size=200), tag_soup, st.text(alphabet="x*+()9^", max_size=60)),
    st.integers(0, 3),
)
def test_property_any_answer_scores_in_range_within_bounds(name, body, repeat):
    entry = _entry(name)
    text = f"<think>t</think><answer>{body * (repeat + 1)}</answer>"
    result = within(HANG_S, _score, name, entry, text)
    assert 0.0 <= result["score"] <= 1.0


# --- gated terms -----------------------------------------------------------------------------------

# per term, a (right, wrong) pair of chain_sum responses on which the term's value is non-zero for both
GATED_RESPONSES = {
    "format": ("<think>x</think><answer>{right}</answer>", "<think>x</think><answer>{wrong}</answer>"),
    "length": ("<think>x y z</think><answer>{right}</answer>", "<think>x y z</think><answer>{wrong}</answer>"),
    "cosine": ("<think>x</think><answer>{right}</answer>", "<think>x</think><answer>{wrong}</answer>"),
    "self_correction": ("<answer>{wrong}</answer> no: <answer>{right}</answer>", None),
    "reference_format": ("<think>x</think><answer>{right}</answer>", "<think>x</think><answer>{wrong}</answer>"),
    "reference_length": (None, "<think>x</think><answer>{wrong}</answer>"),
    "reference_cosine": ("<think>x</think><answer>{right}</answer>", "<think>x</think><answer>{wrong}</answer>"),
}  # fmt: skip


def test_every_term_has_gated_responses():
    assert set(GATED_RESPONSES) == set(reward_mod.TERMS)


@pytest.fixture(scope="module")
def tokenizer_path(tmp_path_factory):
    from rg_verl.cpu.tiny_model import build_tiny_model

    return str(build_tiny_model(tmp_path_factory.mktemp("tok") / "model"))


@pytest.mark.parametrize("term", sorted(GATED_RESPONSES))
def test_a_gated_term_counts_only_for_its_outcome(term, tokenizer_path):
    """Term by term: ``correct`` lets the term through on right answers only, ``incorrect`` on wrong ones only,
    ``none`` on both; what it adds is weight × its value, and ``term/<name>`` reports what it added."""
    entry = _entry("chain_sum")
    answers = {"right": entry["answer"], "wrong": str(int(entry["answer"]) + 1)}
    options = {"tokenizer_path": tokenizer_path, "max_response_length": 64}
    for outcome, template in zip(("correct", "incorrect"), GATED_RESPONSES[term], strict=True):
        if template is None:  # this term is 0 on this outcome whatever the gate
            continue
        response = template.format(**answers)
        plain = _score("chain_sum", entry, response, terms={term: 0.5}, **options)
        assert plain["accuracy"] == float(outcome == "correct") and plain[f"term/{term}"] != 0.0
        base = plain["score"] - 0.5 * plain[f"term/{term}"]
        for gate in ("none", "correct", "incorrect"):
            gated = _score("chain_sum", entry, response, terms={term: 0.5}, gates={term: gate}, **options)
            counts = gate in ("none", outcome)
            assert gated[f"term/{term}"] == (plain[f"term/{term}"] if counts else 0.0), (gate, outcome)
            assert gated["score"] == pytest.approx(base + 0.5 * gated[f"term/{term}"])


def test_gates_name_a_term_and_a_gate():
    with pytest.raises(ValueError, match=r"gates.formats: unknown reward term; valid terms: cosine, format"):
        reward_config(gates={"formats": "correct"})
    with pytest.raises(ValueError, match=r"gates.format: 'right' is not a gate; valid gates: none, correct, incorrect"):
        reward_config(gates={"format": "right"})
    assert reward_config(gates={"format": "none", "length": "correct"}).gates == {"length": "correct"}


# --- thinking templates: the response prefix ------------------------------------------------------


def test_a_prefilled_think_block_counts_for_the_format():
    entry = _entry("chain_sum")
    written = f"add them</think>\n<answer>{entry['answer']}</answer>"  # the template wrote "<think>\n"
    alone = _score("chain_sum", entry, written, response_prefix="")
    assert alone["format_ok"] == 0.0 and alone["correct_strict"] == 0.0 and alone["correct_lenient"] == 1.0
    prefixed = _score("chain_sum", entry, written, response_prefix="<think>\n", terms={"format": 1.0})
    assert prefixed["format_ok"] == 1.0 and prefixed["correct_strict"] == 1.0 and prefixed["term/format"] == 1.0
    # reasoning-gym's own preappend adds nothing more when the template already opened the block
    reference = {"reference_format": 1.0}
    both = {"preappend_thinking_token": True}
    assert _score("chain_sum", entry, written, response_prefix="<think>\n", terms=reference,
                  reference_terms=both)["term/reference_format"] == 1.0  # fmt: skip


@given(
    st.one_of(st.text(max_size=40), tag_soup),
    st.sampled_from(["<think>\n", "<think>\n\n</think>\n\n"]),
    st.sampled_from(["strict", "lenient"]),
)
@settings(max_examples=80)
def test_property_a_prefix_scores_as_if_the_model_had_written_it(text, prefix, mode):
    entry = _entry("chain_sum")
    keys = ("score", "correct_strict", "correct_lenient", "format_ok", "revised", "self_corrected", "pred")
    prefixed = _score("chain_sum", entry, text, response_prefix=prefix, mode=mode, terms={"format": 0.5})
    written = _score("chain_sum", entry, prefix + text, response_prefix="", mode=mode, terms={"format": 0.5})
    assert {k: prefixed[k] for k in keys} == {k: written[k] for k in keys}


def test_a_prefilled_think_block_revised_to_the_right_answer_is_self_corrected_in_strict_mode():
    entry = _entry("chain_sum")
    wrong = int(entry["answer"]) + 1
    written = f"<answer>{wrong}</answer> no, check again</think>\n<answer>{entry['answer']}</answer>"
    prefixed = _score("chain_sum", entry, written, response_prefix="<think>\n", mode="strict")
    assert prefixed["score"] == 1.0 and prefixed["revised"] == 1.0 and prefixed["self_corrected"] == 1.0
    assert _score("chain_sum", entry, written, response_prefix="", mode="strict")["score"] == 0.0


def test_auto_reads_the_prefix_off_the_tokenizer_and_counts_only_the_models_tokens(tmp_path):
    from rg_verl.cpu.tiny_model import _train_tokenizer

    _train_tokenizer(300, 0, 512, thinking_template=True).save_pretrained(tmp_path)
    entry = _entry("chain_sum")
    written = f"x</think><answer>{entry['answer']}</answer>"
    kwargs = {"tokenizer_path": str(tmp_path), "max_response_length": 64}
    auto = _score("chain_sum", entry, written, **kwargs)  # response_prefix: auto, the default
    assert auto["format_ok"] == 1.0
    assert _score("chain_sum", entry, written, response_prefix="", **kwargs)["format_ok"] == 0.0
    # the template's text is not the model's: the token count is the written response's
    alone = _score("chain_sum", entry, written, response_prefix="", **kwargs)
    assert auto["response_tokens"] == alone["response_tokens"]
