"""The step expander of ``rg_verl.search.beam`` on vLLM: every beam of every prompt in one ``LLM.generate`` call."""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Sequence
from functools import partial
from typing import Any

from rg_verl.search.steps import Request, StepExpander

__all__ = ["VLLMStepExpander", "state_seed"]


def state_seed(seed: int, prompt_ids: Sequence[int], state: Sequence[int]) -> int:
    """A 31-bit seed of ``seed`` and a state (its prompt's ids and its own), the same on every machine.

    >>> state_seed(3, [1, 2], [5]) == state_seed(3, [1, 2], [5]) != state_seed(3, [1, 2], [6])
    True
    """
    text = f"{seed}|{','.join(map(str, prompt_ids))}|{','.join(map(str, state))}"
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big") % 2**31


class VLLMStepExpander(StepExpander):
    """Samples ``k`` next reasoning steps per state with ``vllm.LLM.generate`` (an ``expand`` of ``beam``)."""

    def __init__(
        self,
        llm: Any,
        step_max_tokens: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int | None = None,
        eos_ids: Collection[int] = (),
        max_tokens: int | None = None,
        delimiter_ids: Collection[int] = (),
    ):
        super().__init__(step_max_tokens, temperature, top_p, seed, eos_ids, max_tokens, delimiter_ids)
        self.llm = llm
        self.stop_ids = sorted(self.delimiter_ids | self.eos_ids)

    def bind(self, prompt_ids: Sequence[Sequence[int]]):
        """The ``expand(requests, k)`` callable of ``value_beam`` for these prompts (prompt index → ids)."""
        return partial(self._expand, [list(p) for p in prompt_ids])

    def expand(self, prompt_ids: Sequence[Sequence[int]], requests: Sequence[Request], k: int):
        """Per request ``(prompt_index, state_ids)``, ``k`` continuations ``(new_ids, finished)``: one call."""
        return self._expand([list(p) for p in prompt_ids], requests, k)

    def _generate(self, prompt_ids: list[list[int]], requests: Sequence[Request], budgets: Sequence[int], k: int):
        from vllm import SamplingParams

        copies = 1 if self.greedy else k  # greedy: one continuation, copied
        prompts, params = [], []
        for (p, state), budget in zip(requests, budgets, strict=True):
            prompts.append({"prompt_token_ids": prompt_ids[p] + list(state)})
            seed = None if self.seed is None or self.greedy else state_seed(self.seed, prompt_ids[p], state)
            params.append(SamplingParams(
                n=copies, temperature=max(self.temperature, 0.0), top_p=self.top_p, max_tokens=budget,
                stop_token_ids=self.stop_ids, seed=seed, detokenize=False,
            ))  # fmt: skip
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        if len(outputs) != len(requests):
            raise RuntimeError(f"vllm answered {len(outputs)} outputs for {len(requests)} requests")
        return [[list(o.token_ids) for o in out.outputs] * (k // copies) for out in outputs]
