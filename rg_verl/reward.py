"""Reward for reasoning-gym items (verl ``reward.custom_reward_function``).

verl calls ``compute_score(data_source=..., solution_str=..., ground_truth=...,
extra_info=..., **reward_kwargs)``; ``reward.custom_reward_function.reward_kwargs``
arrive as keyword arguments (e.g. ``strict: true``).
"""

from __future__ import annotations

import functools
import json
import logging
import math
from typing import Any, Callable

from reasoning_gym.factory import get_score_answer_fn

__all__ = ["compute_score", "extract_answer"]

logger = logging.getLogger(__name__)

DATA_SOURCE_PREFIX = "reasoning_gym/"
_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"
_ANSWER_OPEN, _ANSWER_CLOSE = "<answer>", "</answer>"
_TAGS = (_THINK_OPEN, _THINK_CLOSE, _ANSWER_OPEN, _ANSWER_CLOSE)


def _strict_answer(text: str) -> str | None:
    body = text.strip()
    if not (body.startswith(_THINK_OPEN) and body.endswith(_ANSWER_CLOSE)):
        return None
    think_end = body.find(_THINK_CLOSE, len(_THINK_OPEN))
    if think_end < 0 or _THINK_OPEN in body[len(_THINK_OPEN) : think_end]:
        return None
    rest = body[think_end + len(_THINK_CLOSE) :].lstrip()
    if not rest.startswith(_ANSWER_OPEN) or len(rest) < len(_ANSWER_OPEN) + len(_ANSWER_CLOSE):
        return None
    answer = rest[len(_ANSWER_OPEN) : -len(_ANSWER_CLOSE)]
    if any(tag in answer for tag in _TAGS):
        return None
    return answer.strip()


def _lenient_answer(text: str) -> str | None:
    last_close = text.rfind(_ANSWER_CLOSE)
    if last_close < 0:
        return None
    start = text.rfind(_ANSWER_OPEN, 0, last_close)
    if start < 0:
        return None
    start += len(_ANSWER_OPEN)
    return text[start : text.find(_ANSWER_CLOSE, start)].strip()


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


@functools.lru_cache(maxsize=None)
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


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict | None = None,
    strict: bool = False,
    **kwargs: Any,
) -> dict[str, float]:
    """Scores a response with reasoning-gym's own scorer for the item's dataset.

    Args:
        data_source: ``"reasoning_gym/<dataset name>"``.
        solution_str: The decoded response.
        ground_truth: The reference answer (used only if ``extra_info`` lacks ``entry``).
        extra_info: The item's ``extra_info``; ``extra_info["entry"]`` is the
            reasoning-gym entry the scorer needs.
        strict: Extract the answer in strict mode (see :func:`extract_answer`).
        **kwargs: Other keyword arguments from verl; ignored.

    Returns:
        ``score`` in [0, 1]; ``accuracy`` (1.0 iff score is 1.0); ``format_ok``
        (1.0 iff strict extraction succeeds); ``answer_found`` (1.0 iff the
        extraction used for ``score`` found an answer).

    Raises:
        ValueError: If ``data_source`` is not a reasoning-gym dataset.
    """
    data_source = str(data_source)
    if not data_source.startswith(DATA_SOURCE_PREFIX):
        raise ValueError(f"Unsupported data_source {data_source!r}: expected '{DATA_SOURCE_PREFIX}<dataset name>'")
    name = data_source[len(DATA_SOURCE_PREFIX) :]
    try:
        scorer = _scorer(name)
    except ValueError:
        raise ValueError(f"Unsupported data_source {data_source!r}: unknown reasoning-gym dataset {name!r}") from None

    strict_answer = extract_answer(solution_str, strict=True)
    answer = strict_answer if strict else extract_answer(solution_str, strict=False)
    score = 0.0
    if answer is not None:
        try:
            score = float(scorer(answer, _entry(name, extra_info, ground_truth)))
        except Exception as e:  # a scorer bug must never crash training
            logger.warning("reasoning-gym scorer for %r raised %r; scoring 0.0", name, e)
            score = 0.0
        score = min(max(score, 0.0), 1.0) if math.isfinite(score) else 0.0
    return {
        "score": score,
        "accuracy": float(score >= 1.0),
        "format_ok": float(strict_answer is not None),
        "answer_found": float(answer is not None),
    }
