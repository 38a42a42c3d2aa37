"""Extra reward terms in :data:`TERMS`, each weighted and added to correctness (``docs/reward.md``)."""

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from rg_verl.common.names import ANSWER_CLOSE, ANSWER_OPEN, THINK_CLOSE, THINK_OPEN


@dataclass(frozen=True)
class Response:
    """What a term may look at."""

    text: str
    correctness: float
    format_ok: bool
    num_tokens: int
    max_tokens: int
    earlier_answers_correct: tuple[bool, ...] = ()
    max_output_length: int = 1024
    preappend_thinking_token: bool = False


def revised_answers(text: str) -> list[str]:
    """Every ``<answer>`` block's content in ``text``, in order; a response revises when two of them differ.

    >>> revised_answers("<answer>3</answer> wait, <answer>4</answer>")
    ['3', '4']
    """
    return [text[start:end].strip() for start, end in _tag_blocks(text, ANSWER_OPEN, ANSWER_CLOSE, limit=math.inf)]


def clamp_unit(value: float) -> float:
    """``value`` clamped to [0, 1]; NaN and infinities (a scorer's bug, not a score) give 0.

    >>> clamp_unit(1.5), clamp_unit(-2.0), clamp_unit(0.25), clamp_unit(float("nan"))
    (1.0, 0.0, 0.25, 0.0)
    """
    return min(max(value, 0.0), 1.0) if math.isfinite(value) else 0.0


def _budget_used(response: Response) -> float:
    """The share of the token budget the response fills, in [0, 1]."""
    return clamp_unit(response.num_tokens / max(response.max_tokens, 1))


def format_term(response: Response) -> float:
    """1 for the strict think/answer format, else 0."""
    return 1.0 if response.format_ok else 0.0


def length_term(response: Response) -> float:
    """Minus the share of the token budget used: 0 (empty) to -1 (full)."""
    return -_budget_used(response)


def cosine_term(response: Response) -> float:
    """Correctness scaled by length on a cosine schedule: [0.5, 1] when correct, [-1, -0.5] when not."""
    if response.correctness >= 1.0:
        short, long = 1.0, 0.5
    else:
        short, long = -1.0, -0.5
    return long + 0.5 * (short - long) * (1.0 + math.cos(math.pi * _budget_used(response)))


def self_correction_term(response: Response) -> float:
    """1 when an earlier answer was wrong and the final one is correct, else 0."""
    revised = any(not correct for correct in response.earlier_answers_correct)
    return 1.0 if revised and response.correctness >= 1.0 else 0.0


# --- reasoning-gym's training rewards, by their own definitions ---

REFERENCE_COSINE_LENGTH = 1000
# reference_cosine's (short, long) values: at an empty response and at REFERENCE_COSINE_LENGTH characters
REFERENCE_COSINE_CORRECT = (1.0, 0.95)
REFERENCE_COSINE_WRONG = (0.0, 0.7)
REFERENCE_MAX_SCORE = 1.0

_SPACE = re.compile(r"\s*")


def _skip_space(text: str, at: int) -> int:
    """The first position at or after ``at`` that is not whitespace."""
    match = _SPACE.match(text, at)
    return match.end() if match else at


def _tag_blocks(text: str, open_tag: str, close_tag: str, limit: float) -> list[tuple[int, int]]:
    """(start, end) of the first ``limit`` blocks' contents as ``re.finditer(open(.*?)close, DOTALL)`` finds them."""
    blocks, start = [], 0
    while len(blocks) < limit and (opened := text.find(open_tag, start)) >= 0:
        closed = text.find(close_tag, opened + len(open_tag))
        if closed < 0:  # no later opening tag can be closed either
            break
        blocks.append((opened + len(open_tag), closed))
        start = closed + len(close_tag)
    return blocks


def _starts_think_then_answer(text: str) -> bool:
    """Whether ``text`` starts with ``\\s*<think>.*?</think>\\s*<answer>.*?</answer>`` (DOTALL); no backtracking."""
    start = _skip_space(text, 0)
    if not text.startswith(THINK_OPEN, start):
        return False
    last_close = text.rfind(ANSWER_CLOSE)
    closed = text.find(THINK_CLOSE, start + len(THINK_OPEN))
    while closed >= 0:
        answer_at = _skip_space(text, closed + len(THINK_CLOSE))
        if text.startswith(ANSWER_OPEN, answer_at):
            # a later </think> leads to a later <answer>, which needs a later </answer> still
            return last_close >= answer_at + len(ANSWER_OPEN)
        closed = text.find(THINK_CLOSE, closed + len(THINK_CLOSE))
    return False


def reference_format_ok(text: str, preappend_thinking_token: bool = False) -> bool:
    """reasoning-gym's format rule: one think block then one answer block at the start, no nested tags; linear time.

    >>> reference_format_ok(" <think>2+2</think>\\n<answer>4</answer> done")
    True
    >>> reference_format_ok("<think>a</think><answer>4</answer><answer>5</answer>")
    False
    >>> reference_format_ok("2+2</think><answer>4</answer>", preappend_thinking_token=True)
    True
    """
    if preappend_thinking_token:
        text = THINK_OPEN + text
    if not _starts_think_then_answer(text):
        return False
    thinks = _tag_blocks(text, THINK_OPEN, THINK_CLOSE, limit=2)
    answers = _tag_blocks(text, ANSWER_OPEN, ANSWER_CLOSE, limit=2)
    if len(thinks) != 1 or len(answers) != 1:
        return False
    contents = (text[slice(*thinks[0])], text[slice(*answers[0])])
    return not any(tag in content for content in contents for tag in (THINK_OPEN, ANSWER_OPEN))


def reference_format_term(response: Response) -> float:
    """1 for reasoning-gym's format rule (:func:`reference_format_ok`), else 0."""
    return 1.0 if reference_format_ok(response.text, response.preappend_thinking_token) else 0.0


def reference_length_term(response: Response) -> float:
    """``(1 - correctness) * min(len(text) / max_output_length, 1)``, in [0, 1]."""
    progress = min(len(response.text) / response.max_output_length, 1.0)
    return (REFERENCE_MAX_SCORE - response.correctness) * progress


def reference_cosine_term(response: Response) -> float:
    """``long + (short - long) * (1 + cos(pi * len(text) / 1000)) / 2``, unclamped, as in reasoning-gym's training."""
    short, long = REFERENCE_COSINE_CORRECT if response.correctness == 1.0 else REFERENCE_COSINE_WRONG
    cosine = math.cos(len(response.text) / REFERENCE_COSINE_LENGTH * math.pi)
    return long + 0.5 * (short - long) * (1.0 + cosine)


TERMS: dict[str, Callable[[Response], float]] = {
    "format": format_term,
    "length": length_term,
    "cosine": cosine_term,
    "self_correction": self_correction_term,
    "reference_format": reference_format_term,
    "reference_length": reference_length_term,
    "reference_cosine": reference_cosine_term,
}
