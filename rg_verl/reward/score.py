"""Reward for reasoning-gym and file math items (verl ``reward.custom_reward_function``).

verl calls ``compute_score(data_source=..., solution_str=..., ground_truth=...,
extra_info=..., **reward_kwargs)``; ``reward.custom_reward_function.reward_kwargs``
arrive as keyword arguments (e.g. ``mode: strict``).

Items of ``reasoning_gym/<dataset>`` are scored by the dataset's own reasoning-gym scorer;
items of ``math/<name>`` (GSM8K, MATH, see ``rg_verl.data.files``) by math-verify's
equivalence with the reference answer.
"""

from __future__ import annotations

import functools
import json
import logging
import math
from collections.abc import Callable
from typing import Any

from reasoning_gym.factory import get_score_answer_fn

from rg_verl.reward.math_verify import last_boxed, math_equal_status
from rg_verl.reward.sympy_guard import SYMPY_PARSED, is_plain_expression
from rg_verl.reward.terms import TERMS, Response, check_terms, revised_answers, self_correction_term
from rg_verl.reward.time_limit import Status, call_bounded
from rg_verl.vocab import ANSWER_CLOSE, ANSWER_OPEN, FILE_PREFIX, MODES, RG_PREFIX, TAGS, THINK_CLOSE, THINK_OPEN

__all__ = ["compute_score", "extract_answer", "response_answer"]

logger = logging.getLogger(__name__)

# earlier answers of a response that are scored for self-correction, at most
MAX_EARLIER_ANSWERS = 3
# seconds one answer may take to score where scoring can be slow (sympy, math-verify)
SCORE_TIMEOUT_S = 0.9


def _strict_answer(text: str) -> str | None:
    body = text.strip()
    if not (body.startswith(THINK_OPEN) and body.endswith(ANSWER_CLOSE)):
        return None
    think_end = body.find(THINK_CLOSE, len(THINK_OPEN))
    if think_end < 0 or THINK_OPEN in body[len(THINK_OPEN) : think_end]:
        return None
    rest = body[think_end + len(THINK_CLOSE) :].lstrip()
    if not rest.startswith(ANSWER_OPEN) or len(rest) < len(ANSWER_OPEN) + len(ANSWER_CLOSE):
        return None
    answer = rest[len(ANSWER_OPEN) : -len(ANSWER_CLOSE)]
    if any(tag in answer for tag in TAGS):
        return None
    return answer.strip()


def _lenient_answer(text: str) -> str | None:
    last_close = text.rfind(ANSWER_CLOSE)
    if last_close < 0:
        return None
    start = text.rfind(ANSWER_OPEN, 0, last_close)
    if start < 0:
        return None
    start += len(ANSWER_OPEN)
    return text[start : text.find(ANSWER_CLOSE, start)].strip()


def extract_answer(text: str, strict: bool = False) -> str | None:
    """Returns the stripped content of the last ``<answer>...</answer>`` in ``text``.

    Only plain substring searches are used, so the cost is linear in ``len(text)``.

    Args:
        text: The model's response.
        strict: If True, the whole response (up to surrounding whitespace) must be
            ``<think>...</think>`` then ``<answer>...</answer>``, with no other tags
            inside the answer; otherwise None. If False, the last complete answer
            block anywhere is used: the last ``<answer>`` that is followed by a
            ``</answer>``, up to the first ``</answer>`` after it.

    Returns:
        The answer text, or None if there is none (or strict formatting fails).

    Examples:
        >>> extract_answer("<think>2+2</think> <answer> 4 </answer>", strict=True)
        '4'
        >>> extract_answer("I think <answer>3</answer>, no: <answer>4</answer>.")
        '4'
        >>> extract_answer("I think <answer>3</answer>, no: <answer>4</answer>.", strict=True) is None
        True
        >>> extract_answer("no tags") is None
        True
    """
    if not isinstance(text, str):
        return None
    return _strict_answer(text) if strict else _lenient_answer(text)


def response_answer(text: Any, data_source: str, strict: bool = False) -> str | None:
    """The answer of a response that the reward scores, for an item of ``data_source``.

    That is :func:`extract_answer`; for file math items (``math/<name>``) in lenient mode, a
    response without an answer block falls back to its last ``\\boxed{}``, the convention of
    math models.

    >>> response_answer("so \\\\boxed{5}", "math/gsm8k"), response_answer("so \\\\boxed{5}", "reasoning_gym/chain_sum")
    ('5', None)
    """
    answer = extract_answer(text, strict=strict)
    if answer is None and not strict and str(data_source).startswith(FILE_PREFIX):
        answer = last_boxed(text)
    return answer


@functools.cache
def _scorer(name: str) -> Callable[[str | None, dict], float]:
    # get_score_answer_fn builds a default dataset instance: do it once per name.
    return get_score_answer_fn(name)


def _as_tuples(value: Any) -> Any:
    return tuple(_as_tuples(v) for v in value) if isinstance(value, list) else value


# The dataset stores entries as JSON, which turns tuples into lists. A few scorers
# compare metadata against tuples: restore those fields (dataset -> metadata keys).
_TUPLE_FIELDS = {"arc_agi": ("input", "output"), "rearc": ("input", "output")}


def _entry(name: str, extra_info: Any, ground_truth: Any) -> dict:
    entry = extra_info.get("entry") if isinstance(extra_info, dict) else None
    if isinstance(entry, str):
        try:
            entry = json.loads(entry)
        except ValueError:
            entry = None
    if not isinstance(entry, dict):
        logger.warning("extra_info has no reasoning-gym 'entry'; scoring against ground_truth only")
        entry = {"question": "", "answer": "" if ground_truth is None else str(ground_truth), "metadata": {}}
    metadata = entry.get("metadata")
    if name in _TUPLE_FIELDS and isinstance(metadata, dict):
        fixed = {k: _as_tuples(metadata[k]) for k in _TUPLE_FIELDS[name] if k in metadata}
        entry = {**entry, "metadata": {**metadata, **fixed}}
    return entry


# Longest response, in characters per allowed token, that is tokenised for the length terms;
# anything longer already fills its budget.
MAX_CHARS_PER_TOKEN = 32


@functools.lru_cache(maxsize=4)
def _tokenizer(path: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def count_tokens(text: str, tokenizer_path: str, max_tokens: int) -> int:
    """Tokens in ``text`` (capped cheaply for absurdly long text)."""
    if len(text) > max_tokens * MAX_CHARS_PER_TOKEN:
        return max_tokens
    return len(_tokenizer(tokenizer_path)(text, add_special_tokens=False)["input_ids"])


def score_in_worker(name: str, answer: str, entry: dict) -> float:
    """Runs a reasoning-gym scorer; called inside a bounded worker process."""
    return float(_scorer(name)(answer, entry))


def _correctness(name: str, answer: str | None, entry: dict, by_math: bool = False) -> tuple[float, bool]:
    """(score in [0, 1], whether scoring failed) of ``answer`` for an entry of dataset ``name``.

    With ``by_math`` the answer is scored by math-verify's equivalence with the entry's answer.
    Scorers that parse with sympy get only plain expressions (``rg_verl.reward.sympy_guard``) and
    run in a worker that is killed after :data:`SCORE_TIMEOUT_S`; the rest run here.
    """
    if answer is None:
        return 0.0, False
    if by_math:
        score, status = math_equal_status(answer, str(entry.get("answer", "")), timeout=SCORE_TIMEOUT_S)
        return score, status != Status.OK
    if name in SYMPY_PARSED:
        if not is_plain_expression(answer):
            return 0.0, False
        score, status = call_bounded(score_in_worker, name, answer, entry, timeout=SCORE_TIMEOUT_S, default=0.0)
        if status != Status.OK:
            logger.warning("reasoning-gym scorer for %r: %s; scoring 0.0", name, status.value)
            return 0.0, True
    else:
        try:
            score = float(_scorer(name)(answer, entry))
        except Exception as e:  # a scorer bug must never crash training
            logger.warning("reasoning-gym scorer for %r raised %r; scoring 0.0", name, e)
            return 0.0, True
    return (min(max(score, 0.0), 1.0) if math.isfinite(score) else 0.0), False


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict | None = None,
    mode: str = "lenient",
    terms: dict[str, float] | None = None,
    tokenizer_path: str | None = None,
    max_response_length: int | None = None,
    math_datasets: list[str] | tuple[str, ...] = (),
    **kwargs: Any,
) -> dict[str, float]:
    """Scores a response: correctness of its final answer, plus weighted extra terms.

    verl passes ``reward.custom_reward_function.reward_kwargs`` as keyword arguments.

    Args:
        data_source: ``"reasoning_gym/<dataset name>"``, or ``"math/<name>"`` for a file math
            item (scored by math-verify).
        solution_str: The decoded response.
        ground_truth: The reference answer (used only if ``extra_info`` lacks ``entry``).
        extra_info: The item's ``extra_info``; ``extra_info["entry"]`` is the
            entry the scorer needs.
        mode: Which extraction the reward uses: ``"strict"`` or ``"lenient"``
            (see :func:`extract_answer`). Both are always reported. For ``math/`` items,
            a response without an answer block falls back, in lenient mode, to its last
            ``\\boxed{}``, the convention of math models.
        terms: ``{term name: weight}`` of extra terms (see ``rg_verl.reward.terms``).
        tokenizer_path: Tokenizer for response lengths in tokens (``length`` and ``cosine``).
        max_response_length: The response budget in tokens the length terms are relative to.
        math_datasets: reasoning-gym datasets whose answers are scored by math-verify's
            symbolic equivalence with the entry's answer instead of the dataset's own scorer.
        **kwargs: Other keyword arguments from verl; ignored.

    Returns:
        ``score`` (the reward: correctness under ``mode`` plus each weight × term);
        ``correct_strict`` and ``correct_lenient`` (correctness under each extraction);
        ``accuracy`` (1.0 iff correctness under ``mode`` is 1.0); ``format_ok``;
        ``answer_found`` (under ``mode``); ``revised`` (the response changed its answer,
        see ``rg_verl.reward.terms.revised_answers``); ``self_corrected`` (it revised a wrong
        answer and ended correct); ``scoring_failed`` (the scorer raised); ``response_tokens``
        when a tokenizer is given; and ``term/<name>`` for each weighted term.

    Raises:
        ValueError: If ``data_source`` is not a reasoning-gym dataset, or a keyword
            argument is invalid (an unknown mode or term, a missing tokenizer).
    """
    if mode not in MODES:
        raise ValueError(f"reward_kwargs.mode must be one of {MODES}, got {mode!r}")
    weights = check_terms(dict(terms or {}))
    weights = {name: weight for name, weight in weights.items() if weight != 0.0}
    if {"length", "cosine"} & set(weights) and not (tokenizer_path and max_response_length):
        raise ValueError("the length and cosine reward terms need reward_kwargs.tokenizer_path and max_response_length")
    data_source = str(data_source)
    from_file = data_source.startswith(FILE_PREFIX) and len(data_source) > len(FILE_PREFIX)
    if from_file:
        name = data_source[len(FILE_PREFIX) :]
    elif data_source.startswith(RG_PREFIX):
        name = data_source[len(RG_PREFIX) :]
        try:
            _scorer(name)
        except Exception:  # reasoning-gym raises ValueError, or asserts (composite)
            raise ValueError(
                f"Unsupported data_source {data_source!r}: unknown reasoning-gym dataset {name!r}"
            ) from None
    else:
        raise ValueError(
            f"Unsupported data_source {data_source!r}: expected '{RG_PREFIX}<dataset name>' "
            f"or '{FILE_PREFIX}<name>'"
        )
    text = solution_str if isinstance(solution_str, str) else ""
    entry = _entry(name, extra_info, ground_truth)
    by_math = from_file or name in (math_datasets or ())

    strict_answer = response_answer(text, data_source, strict=True)
    lenient_answer = response_answer(text, data_source, strict=False)
    correct_strict, failed_strict = _correctness(name, strict_answer, entry, by_math)
    if lenient_answer == strict_answer:
        correct_lenient, failed_lenient = correct_strict, failed_strict
    else:
        correct_lenient, failed_lenient = _correctness(name, lenient_answer, entry, by_math)
    answer, correctness = (strict_answer, correct_strict) if mode == "strict" else (lenient_answer, correct_lenient)

    answers = revised_answers(text)
    earlier = [a for a in answers[:-1] if a != (answers[-1] if answers else None)][-MAX_EARLIER_ANSWERS:]
    earlier_correct = tuple(_correctness(name, a, entry, by_math)[0] >= 1.0 for a in earlier)

    num_tokens = max_tokens = 0
    if tokenizer_path and max_response_length:
        max_tokens = int(max_response_length)
        num_tokens = count_tokens(text, tokenizer_path, max_tokens)
    response = Response(
        text=text,
        correctness=correctness,
        format_ok=strict_answer is not None,
        num_tokens=num_tokens,
        max_tokens=max_tokens,
        earlier_answers_correct=earlier_correct,
    )
    result = {
        "score": correctness,
        "correct_strict": correct_strict,
        "correct_lenient": correct_lenient,
        "accuracy": float(correctness >= 1.0),
        "format_ok": float(strict_answer is not None),
        "answer_found": float(answer is not None),
        "revised": float(bool(earlier)),
        "self_corrected": self_correction_term(response),
        "scoring_failed": float(failed_strict or failed_lenient),
    }
    if max_tokens:
        result["response_tokens"] = float(num_tokens)
    for term, weight in weights.items():
        value = TERMS[term](response)
        result[f"term/{term}"] = value
        result["score"] += weight * value
    return result
