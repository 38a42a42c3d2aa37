"""The answer of a response: the last ``<answer>`` block, in the strict or the lenient format, in linear time."""

from __future__ import annotations

from typing import Any

from rg_verl.common.final_answer import last_boxed
from rg_verl.common.names import ANSWER_CLOSE, ANSWER_OPEN, TAGS, THINK_CLOSE, THINK_OPEN, parse_data_source

__all__ = ["extract_answer", "response_answer"]


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
    """Returns the stripped content of the last ``<answer>...</answer>`` in ``text``."""
    if not isinstance(text, str):
        return None
    return _strict_answer(text) if strict else _lenient_answer(text)


def response_answer(text: Any, data_source: str, strict: bool = False) -> str | None:
    """:func:`extract_answer`, falling back to the last ``\\boxed{}`` for lenient math items.

    >>> response_answer("so \\\\boxed{5}", "math/gsm8k"), response_answer("so \\\\boxed{5}", "reasoning_gym/chain_sum")
    ('5', None)
    """
    answer = extract_answer(text, strict=strict)
    parsed = parse_data_source(data_source)
    if answer is None and not strict and parsed is not None and parsed[1]:
        answer = last_boxed(text)
    return answer
