"""Value-guided search at test time: OREO's step-level beam search and best-of-K reranking, over callables."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Beam", "Expand", "Request", "Value", "value_beam", "value_rerank"]

Request = tuple[int, tuple[int, ...]]
Expand = Callable[[list[Request], int], Sequence[Sequence[tuple[Sequence[int], bool]]]]
Value = Callable[[list[Request]], Sequence[float]]


@dataclass(frozen=True)
class Beam:
    """A scored state: the response's token ids, whether it is finished, and its value V."""

    ids: tuple[int, ...]
    finished: bool
    value: float


def _check_positive(**arguments: int) -> None:
    for name, number in arguments.items():
        if not isinstance(number, int) or isinstance(number, bool) or number < 1:
            raise ValueError(f"{name}: {number!r} is not a whole number >= 1; pass at least 1")


def _best(beams: Sequence[Beam], count: int) -> list[Beam]:
    """The ``count`` highest-valued ``beams``; ties keep their order (Python's sort is stable)."""
    return sorted(beams, key=lambda beam: -beam.value)[:count]


def _expand(expand: Expand, requests: list[Request], k: int) -> list[list[tuple[tuple[int, ...], bool]]]:
    """``expand`` called once, its answer checked: one list of ``k`` continuations per request."""
    answer = list(expand(requests, k))
    if len(answer) != len(requests):
        raise ValueError(f"expand: answered {len(answer)} lists for {len(requests)} requests; answer one per request")
    out = []
    for (prompt, _), continuations in zip(requests, answer, strict=True):
        continuations = list(continuations)
        if len(continuations) != k:
            raise ValueError(f"expand: answered {len(continuations)} continuations for prompt {prompt}, asked for {k}")
        out.append([(tuple(int(i) for i in ids), bool(finished)) for ids, finished in continuations])
    return out


def _score(value: Value, requests: list[Request]) -> list[float]:
    """``value`` called once, its answer checked: one number per request, none of them NaN."""
    if not requests:
        return []
    scores = [float(v) for v in value(requests)]
    if len(scores) != len(requests):
        raise ValueError(f"value: answered {len(scores)} numbers for {len(requests)} states; answer one per state")
    for (prompt, ids), score in zip(requests, scores, strict=True):
        if math.isnan(score):
            raise ValueError(f"value: NaN for prompt {prompt}'s state of {len(ids)} tokens; check the value model")
    return scores


def _candidates(expand: Expand, value: Value, live: Sequence[Sequence[Beam]], k: int) -> list[list[Beam]]:
    """One step for every prompt: every live beam expanded ``k`` times and scored, in one call each."""
    requests = [(p, beam.ids) for p, beams in enumerate(live) for beam in beams]
    expansions = _expand(expand, requests, k)
    states = [
        (p, ids + new, finished) for (p, ids), row in zip(requests, expansions, strict=True) for new, finished in row
    ]
    scores = _score(value, [(p, ids) for p, ids, _ in states])
    out: list[list[Beam]] = [[] for _ in live]
    for (p, ids, finished), score in zip(states, scores, strict=True):
        out[p].append(Beam(ids, finished, score))
    return out


def value_beam(
    prompts: Sequence[Any], expand: Expand, value: Value, *, beam_width: int, max_steps: int, n_answers: int
) -> list[list[Beam]]:
    """OREO's step-level beam search: per prompt, the best ``n_answers`` responses by value."""
    _check_positive(beam_width=beam_width, max_steps=max_steps, n_answers=n_answers)
    live: list[list[Beam]] = [[Beam((), False, 0.0)] for _ in prompts]
    pool: list[list[Beam]] = [[] for _ in prompts]
    for _ in range(max_steps):
        if not any(live):
            break
        for p, candidates in enumerate(_candidates(expand, value, live, beam_width)):
            pool[p].extend(beam for beam in candidates if beam.finished)
            live[p] = _best([beam for beam in candidates if not beam.finished], beam_width)
    return [_answers(answers, beams, n_answers) for answers, beams in zip(pool, live, strict=True)]


def _answers(finished: Sequence[Beam], live: Sequence[Beam], count: int) -> list[Beam]:
    """The best ``count`` of ``finished``, then (when those run out) the best of ``live``."""
    best = _best(finished, count)
    return best + _best(live, count - len(best))


def value_rerank(prompts: Sequence[Any], sample: Expand, value: Value, *, k: int, n_answers: int) -> list[list[Beam]]:
    """Best-of-K: ``k`` whole responses per prompt, the best ``n_answers`` of them by value (ties: sample order)."""
    _check_positive(k=k, n_answers=n_answers)
    empty = [[Beam((), False, 0.0)] for _ in prompts]
    return [_best(candidates, n_answers) for candidates in _candidates(sample, value, empty, k)]
