"""The numbers an evaluation reports, computed from per-completion scores (pure functions; ``docs/evaluation.md``)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence

__all__ = ["pass_at_k", "mean_at_k", "majority_answer", "majority_correct", "aggregate", "default_k_values"]

Completion = Mapping[str, object]
# the reward's per-turn outcome of an episode: solved_by_turn_1, solved_by_turn_2, ...
SOLVED_BY = "solved_by_turn_"


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k estimate for one item: ``1 - C(n - c, k) / C(n, k)`` (Chen et al., 2021).

    >>> round(pass_at_k(3, 1, 1), 12), round(pass_at_k(3, 1, 2), 12)
    (0.333333333333, 0.666666666667)
    >>> pass_at_k(3, 1, 3), pass_at_k(5, 0, 5)
    (1.0, 0.0)
    """
    if not 1 <= k <= n or not 0 <= c <= n:
        raise ValueError(f"pass@k needs 1 <= k <= n and 0 <= c <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    product = 1.0
    for i in range(n - c + 1, n + 1):
        product *= 1.0 - k / i
    return 1.0 - product


def mean_at_k(correct: Sequence[bool], k: int) -> float:
    """Mean correctness of the first ``k`` completions of one item.

    >>> mean_at_k([True, False, True, True], 2)
    0.5
    """
    if not 1 <= k <= len(correct):
        raise ValueError(f"mean@k needs 1 <= k <= {len(correct)} completions, got k={k}")
    return sum(bool(c) for c in correct[:k]) / k


def majority_answer(answers: Sequence[str | None]) -> str | None:
    """The most common non-None answer; ties go to the answer that appeared first.

    >>> majority_answer(["3", "4", "4", None, None, None]), majority_answer(["3", "4"]), majority_answer([None])
    ('4', '3', None)
    """
    counts = Counter(a for a in answers if a is not None)
    if not counts:
        return None
    best = max(counts.values())
    return next(a for a in answers if a is not None and counts[a] == best)


def majority_correct(answers: Sequence[str | None], correct: Sequence[bool], k: int) -> float:
    """1.0 if the majority answer of the first ``k`` completions is correct; completions without an answer do not vote.

    >>> majority_correct(["3", "4", "4"], [False, True, True], 3), majority_correct(["3", "4"], [False, True], 2)
    (1.0, 0.0)
    """
    if not 1 <= k <= len(answers) or len(answers) != len(correct):
        raise ValueError(f"maj@k needs 1 <= k <= n and one correctness per answer, got k={k}, n={len(answers)}")
    winner = majority_answer(answers[:k])
    if winner is None:
        return 0.0
    return float(any(ok for a, ok in zip(answers[:k], correct[:k], strict=True) if a == winner))


def default_k_values(n: int) -> list[int]:
    """Powers of two below ``n``, and ``n`` itself: ``[1, 2, 4, ..., n]``.

    >>> default_k_values(3), default_k_values(8), default_k_values(1)
    ([1, 2, 3], [1, 2, 4, 8], [1])
    """
    values, k = [], 1
    while k < n:
        values.append(k)
        k *= 2
    return [*values, n]


def _mean(values: Sequence[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None


def _is_correct(value: object) -> bool:
    return float(value or 0.0) >= 1.0


def _episode_metrics(completions: Sequence[Completion]) -> dict[str, float | None]:
    """``mean_turns`` and ``success@turn<j>`` of retry episodes; nothing for single answers."""
    if not completions or any(c.get("turns") is None for c in completions):
        return {}
    solved = sorted({int(key.rsplit("_", 1)[1]) for c in completions for key in c if key.startswith(SOLVED_BY)})
    result = {"mean_turns": _mean([float(c["turns"]) for c in completions])}
    for j in solved:
        result[f"success@turn{j}"] = _mean([float(c.get(f"{SOLVED_BY}{j}", 0.0)) for c in completions])
    return result


def aggregate(items: Sequence[Sequence[Completion]], k_values: Sequence[int]) -> dict[str, float | int | None]:
    """All metrics over ``items``; a ``@k`` metric leaves out items with fewer than ``k`` completions (None: none)."""
    completions = [c for item in items for c in item]
    revised = [c for c in completions if c.get("revised")]
    tokens = [float(c["num_tokens"]) for c in completions if c.get("num_tokens") is not None]
    result: dict[str, float | int | None] = {
        "num_items": len(items),
        "num_completions": len(completions),
        "mean_score": _mean([float(c.get("score", 0.0)) for c in completions]),
        "accuracy": _mean([float(_is_correct(c.get("accuracy"))) for c in completions]),
        "accuracy_strict": _mean([float(_is_correct(c.get("correct_strict"))) for c in completions]),
        "accuracy_lenient": _mean([float(_is_correct(c.get("correct_lenient"))) for c in completions]),
        "format_rate": _mean([float(bool(c.get("format_ok"))) for c in completions]),
        "answer_rate": _mean([float(bool(c.get("answer_found"))) for c in completions]),
        "mean_response_tokens": _mean(tokens),
        "revision_rate": _mean([float(bool(c.get("revised"))) for c in completions]),
        "self_correction_rate": _mean([float(bool(c.get("self_corrected"))) for c in revised]),
        "scoring_failures": sum(int(bool(c.get("scoring_failed"))) for c in completions),
    }
    result.update(_episode_metrics(completions))
    for k in k_values:
        usable = [item for item in items if len(item) >= k]
        correct = [[_is_correct(c.get("accuracy")) for c in item] for item in usable]
        answers = [[c.get("model_answer") for c in item] for item in usable]
        result[f"pass@{k}"] = _mean([pass_at_k(len(cs), sum(cs), k) for cs in correct])
        result[f"mean@{k}"] = _mean([mean_at_k(cs, k) for cs in correct])
        result[f"maj@{k}"] = _mean([majority_correct(a, cs, k) for a, cs in zip(answers, correct, strict=True)])
    return result
