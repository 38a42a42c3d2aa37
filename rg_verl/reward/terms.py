"""Extra reward terms, added to correctness with a weight each.

Every term is a plain function ``term(response: Response) -> float`` in :data:`TERMS`. The reward
(``rg_verl.reward.compute_score``) adds ``weight * term(response)`` for each term whose weight in
``reward.custom_reward_function.reward_kwargs.terms`` is non-zero, and reports every term's value.

To add a term: write the function here, document its range, add it to :data:`TERMS` and its name to
``rg_verl.vocab.TERM_NAMES`` (the names ``rg_verl.config.RewardConfig`` accepts; a test keeps the two equal).

Terms:

- ``format`` in {0, 1}: 1 when the response is exactly ``<think>…</think><answer>…</answer>``.
- ``length`` in [-1, 0]: minus the response length in tokens over the maximum response length,
  clamped; a response that fills its whole budget gets -1.
- ``cosine`` in [-1, 1]: correctness scaled by length with a cosine schedule (Yeo et al., 2025,
  "Demystifying Long Chain-of-Thought Reasoning in LLMs"). A correct answer earns between 1.0 (empty
  response) and 0.5 (full budget); a wrong one between -1.0 (empty) and -0.5 (full budget), so
  shorter is better when right, and thinking longer costs less when wrong.
- ``self_correction`` in {0, 1}: 1 when the response revised its answer and ended correct (see
  :func:`revised_answers` for the detection rule).
"""

import math
from collections.abc import Callable
from dataclasses import dataclass

from rg_verl.vocab import ANSWER_CLOSE, ANSWER_OPEN


@dataclass(frozen=True)
class Response:
    """What a term may look at.

    Args:
        text: the decoded response.
        correctness: the score of the final answer, in [0, 1].
        format_ok: whether the response has the strict think/answer format.
        num_tokens: response length in tokens.
        max_tokens: the configured maximum response length in tokens.
        earlier_answers_correct: for each answer the response gave before its final one, in order,
            whether it was correct.
    """

    text: str
    correctness: float
    format_ok: bool
    num_tokens: int
    max_tokens: int
    earlier_answers_correct: tuple[bool, ...] = ()


def revised_answers(text: str) -> list[str]:
    """Every ``<answer>…</answer>`` block in ``text``, in order (the last one is the final answer).

    Detection rule for self-correction, shared by the reward and the evaluator: a response
    *revises* its answer when it contains two or more answer blocks whose contents (stripped)
    differ. The earlier blocks are its intermediate answers. Plain substring search, linear time.

    >>> revised_answers("<answer>3</answer> wait, <answer>4</answer>")
    ['3', '4']
    """
    answers, start = [], 0
    while (open_at := text.find(ANSWER_OPEN, start)) >= 0:
        close_at = text.find(ANSWER_CLOSE, open_at + len(ANSWER_OPEN))
        if close_at < 0:
            break
        answers.append(text[open_at + len(ANSWER_OPEN) : close_at].strip())
        start = close_at + len(ANSWER_CLOSE)
    return answers


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


TERMS: dict[str, Callable[[Response], float]] = {
    "format": format_term,
    "length": length_term,
    "cosine": cosine_term,
    "self_correction": self_correction_term,
}
