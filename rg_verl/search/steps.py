"""Where a reasoning step ends: the rule every step expander of a value-guided search shares."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

__all__ = ["Continuation", "Request", "StepExpander", "delimiter_token_ids"]

Request = tuple[int, Sequence[int]]  # (prompt index, state ids)
Continuation = tuple[tuple[int, ...], bool]  # (new ids, finished)


def delimiter_token_ids(tokenizer: Any, delimiters: Sequence[str]) -> frozenset[int]:
    """The ids of the tokenizer's tokens whose text, decoded alone, holds one of ``delimiters``."""
    if any(not d for d in delimiters):
        raise ValueError(f"delimiters: {list(delimiters)!r} holds an empty string, which every text holds; drop it")
    if not delimiters:
        return frozenset()
    texts = tokenizer.batch_decode([[i] for i in range(len(tokenizer))])  # the whole vocabulary: once per search
    return frozenset(i for i, text in enumerate(texts) if any(d in text for d in delimiters))


class StepExpander:
    """The step rule and the counting of an ``expand(requests, k)`` of ``rg_verl.search.beam``."""

    def __init__(
        self,
        step_max_tokens: int,
        temperature: float,
        top_p: float,
        seed: int | None,
        eos_ids: Collection[int],
        max_tokens: int | None,
        delimiter_ids: Collection[int],
    ):
        if step_max_tokens < 1:
            raise ValueError(f"step_max_tokens: {step_max_tokens} is below 1; allow a step at least one token")
        if max_tokens is not None and max_tokens < 1:
            raise ValueError(f"max_tokens: {max_tokens} is below 1; allow at least one token, or pass None")
        if temperature < 0 or not 0 < top_p <= 1:
            raise ValueError(f"temperature {temperature}, top_p {top_p}: need temperature >= 0 and 0 < top_p <= 1")
        self.step_max_tokens, self.max_tokens = step_max_tokens, max_tokens
        self.temperature, self.top_p, self.seed = temperature, top_p, seed
        self.eos_ids, self.delimiter_ids = frozenset(eos_ids), frozenset(delimiter_ids)
        self.calls = 0  # generation calls made so far
        self.continuations = self.tokens = 0  # made so far, and their tokens

    @property
    def greedy(self) -> bool:
        """A temperature below vLLM's greedy threshold, 1e-5 (where it refuses n > 1), as the backends decide."""
        return self.temperature < 1e-5

    def _budget(self, state_length: int) -> int:
        if self.max_tokens is None:
            return self.step_max_tokens
        return max(0, min(self.step_max_tokens, self.max_tokens - state_length))

    def _expand(self, bound: Any, requests: Sequence[Request], k: int) -> list[list[Continuation]]:
        """``k`` continuations per request, in one call; a state without budget gets ``k`` empty, finished ones."""
        budgets = [self._budget(len(state)) for _, state in requests]
        out: list[list[Continuation]] = [[((), True)] * k for _ in requests]
        todo = [i for i, budget in enumerate(budgets) if budget > 0]
        if not todo:
            return out
        samples = self._generate(bound, [requests[i] for i in todo], [budgets[i] for i in todo], k)
        self.calls += 1
        for i, row_samples in zip(todo, samples, strict=True):
            out[i] = [self._cut(sample, budgets[i], len(requests[i][1])) for sample in row_samples]
            self.continuations += k
            self.tokens += sum(len(new) for new, _ in out[i])
        return out

    def _generate(self, bound: Any, requests: Sequence[Request], budgets: Sequence[int], k: int):
        raise NotImplementedError

    def _cut(self, tokens: Sequence[int], budget: int, state_length: int) -> Continuation:
        """A row's step: through its first end-of-sequence or delimiter token within ``budget``, and whether it ends."""
        new = list(tokens[:budget])
        for i, token in enumerate(new):
            if token in self.eos_ids:
                return tuple(new[: i + 1]), True
            if token in self.delimiter_ids:
                new = new[: i + 1]
                break
        spent = self.max_tokens is not None and state_length + len(new) >= self.max_tokens
        return tuple(new), spent
