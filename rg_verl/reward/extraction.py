"""The answer of a response: the last ``<answer>`` block, in the strict or the lenient format.

- strict: the whole response is ``<think>…</think>`` then ``<answer>…</answer>``, no other tags inside
  the answer;
- lenient: the last complete ``<answer>…</answer>`` block anywhere; for file math items (``math/``),
  a response without one falls back to its last ``\\boxed{}``.

Only plain substring searches are used, so the cost is linear in the length of the response.
"""

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
    parsed = parse_data_source(data_source)
    if answer is None and not strict and parsed is not None and parsed[1]:
        answer = last_boxed(text)
    return answer
