"""Extra reward terms, added to correctness with a weight each.

Every term is a plain function ``term(response: Response) -> float`` in :data:`TERMS`. The reward
(``rg_verl.reward.compute_score``) adds ``weight * term(response)`` for each term whose weight in
``reward.custom_reward_function.reward_kwargs.terms`` is non-zero, and reports every term's value.

To add a term: write the function here, document its range, add it to :data:`TERMS` and its name to
``rg_verl.common.names.TERM_NAMES`` (the names ``rg_verl.reward.config.RewardConfig`` accepts; a test keeps the
two equal).

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

The ``reference_*`` terms are the secondary rewards of reasoning-gym's own training code, by its
definitions: they count characters of the response as verl decodes it (special tokens skipped), not
tokens, and take their options from ``reward_kwargs.reference_terms``. Their correctness is the
reward's, under the configured ``mode``; their weight plays the reference's ``scaling_factor``.

- ``reference_format`` in {0, 1}: 1 for exactly one think block and one answer block, the response
  starting with them (see :func:`reference_format_ok`).
- ``reference_length`` in [0, 1]: ``(1 - correctness) * min(characters / max_output_length, 1)``:
  an answer that is not fully right earns more the longer it is.
- ``reference_cosine`` in [0, 1]: correctness scaled by length in characters on a cosine of period
  2000 characters: a correct answer earns 1.0 (empty) down to 0.95 (1000 characters), a wrong one 0.0
  (empty) up to 0.7 (1000 characters); past 1000 characters the value swings back (see
  :func:`reference_cosine_term`).
"""

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from rg_verl.common.names import ANSWER_CLOSE, ANSWER_OPEN, THINK_CLOSE, THINK_OPEN


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
        max_output_length: the characters at which ``reference_length`` reaches its full value
            (``reward_kwargs.reference_terms.max_output_length``; the default is that field's).
        preappend_thinking_token: whether ``reference_format`` puts ``<think>`` before the response
            first (``reward_kwargs.reference_terms.preappend_thinking_token``).
    """

    text: str
    correctness: float
    format_ok: bool
    num_tokens: int
    max_tokens: int
    earlier_answers_correct: tuple[bool, ...] = ()
    max_output_length: int = 1024
    preappend_thinking_token: bool = False


def revised_answers(text: str) -> list[str]:
    """Every ``<answer>…</answer>`` block in ``text``, in order (the last one is the final answer).

    Detection rule for self-correction, shared by the reward and the evaluator: a response
    *revises* its answer when it contains two or more answer blocks whose contents (stripped)
    differ. The earlier blocks are its intermediate answers. Plain substring search, linear time.

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

# the length in characters over which reference_cosine moves from its short value to its long one
REFERENCE_COSINE_LENGTH = 1000
# reference_cosine's (short, long) values: at an empty response and at REFERENCE_COSINE_LENGTH characters
REFERENCE_COSINE_CORRECT = (1.0, 0.95)
REFERENCE_COSINE_WRONG = (0.0, 0.7)
# the most correctness can be; reference_length pays the shortfall from it
REFERENCE_MAX_SCORE = 1.0

_SPACE = re.compile(r"\s*")  # the whitespace the reference's pattern allows, as its regex defines it


def _skip_space(text: str, at: int) -> int:
    """The first position at or after ``at`` that is not whitespace."""
    match = _SPACE.match(text, at)
    return match.end() if match else at


def _tag_blocks(text: str, open_tag: str, close_tag: str, limit: float) -> list[tuple[int, int]]:
    """(start, end) of the content of the first ``limit`` ``open_tag…close_tag`` blocks, each closed by
    the first ``close_tag`` after its ``open_tag``, searched left to right after the previous block (what
    ``re.finditer`` of ``open(.*?)close`` with DOTALL finds). Linear time."""
    blocks, start = [], 0
    while len(blocks) < limit and (opened := text.find(open_tag, start)) >= 0:
        closed = text.find(close_tag, opened + len(open_tag))
        if closed < 0:  # no later opening tag can be closed either
            break
        blocks.append((opened + len(open_tag), closed))
        start = closed + len(close_tag)
    return blocks


def _starts_think_then_answer(text: str) -> bool:
    """Whether ``text`` starts (after whitespace) with a think block, whitespace, and an answer block:
    a match at its start of ``\\s*<think>.*?</think>\\s*<answer>.*?</answer>`` (DOTALL).

    Checked without backtracking: any ``</think>`` that closes the think block may be the one followed
    by ``<answer>``, and the answer block then needs a ``</answer>`` anywhere after that opening tag.
    """
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
    """reasoning-gym's format rule: exactly one think block and one answer block, no nested tags.

    With ``preappend_thinking_token``, ``<think>`` is put before ``text`` first (for prompts that end
    in the opening tag, so the response holds only the rest). Then all of these hold:

    - ``text`` starts, after optional whitespace, with ``<think>…</think>``, optional whitespace and
      ``<answer>…</answer>`` (a prefix match: anything may follow);
    - it has exactly one ``<think>…</think>`` block and exactly one ``<answer>…</answer>`` block, each
      closed by the first closing tag after its opening one;
    - neither block's content holds ``<think>`` or ``<answer>``.

    The same rule as the reference's regular expressions, in linear time (a regex backtracks
    quadratically on a response that repeats ``</think><answer>``).

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
    """The shortfall from full correctness times the length in characters over ``max_output_length``.

    ``(1 - correctness) * min(len(text) / max_output_length, 1)``, in [0, 1]: 0 for a correct answer
    whatever its length; for one that is not fully correct, longer earns more, up to the cap.
    """
    progress = min(len(response.text) / response.max_output_length, 1.0)
    return (REFERENCE_MAX_SCORE - response.correctness) * progress


def reference_cosine_term(response: Response) -> float:
    """Correctness scaled by length in characters on a cosine, as reasoning-gym's training defines it.

    With ``progress = len(text) / 1000`` and (short, long) = (1.0, 0.95) when correctness is exactly
    1.0, else (0.0, 0.7): ``long + (short - long) * (1 + cos(pi * progress)) / 2``. So a correct answer
    earns 1.0 (empty) down to 0.95 (1000 characters), and a wrong or partly right one 0.0 (empty) up to
    0.7 (1000 characters).

    ``progress`` is not clamped, as in the reference: past 1000 characters the cosine keeps turning, so
    the value swings back to the short one at 2000 characters (a wrong answer of 2000 characters earns
    0.0 again, like an empty one) and repeats every 2000 characters. The value stays in [0, 1].
    """
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
