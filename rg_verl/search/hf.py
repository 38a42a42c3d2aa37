"""The callables of ``rg_verl.search.beam`` with transformers: a step expander and a value scorer."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from functools import partial
from typing import Any

import torch
from transformers import DynamicCache, StoppingCriteria, StoppingCriteriaList

from rg_verl.common.hf_generate import batch_seed, eos_token_ids
from rg_verl.search.steps import Request, StepExpander, delimiter_token_ids

__all__ = ["HFStepExpander", "HFValueScorer", "PromptCache", "delimiter_token_ids"]

class _StopAfter(StoppingCriteria):
    """Stops a row of ``generate`` once its newest token is one of ``ids``."""

    def __init__(self, ids: Collection[int]):
        self.ids = torch.tensor(sorted(ids), dtype=torch.long)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs) -> torch.BoolTensor:
        if self.ids.device != input_ids.device:
            self.ids = self.ids.to(input_ids.device)
        return torch.isin(input_ids[:, -1], self.ids)


def _device(model: Any) -> torch.device:
    return next(model.parameters()).device


def _left_padded(rows: Sequence[Sequence[int]], width: int, pad_id: int) -> tuple[list[list[int]], list[list[int]]]:
    ids = [[pad_id] * (width - len(r)) + list(r) for r in rows]
    return ids, [[0] * (width - len(r)) + [1] * len(r) for r in rows]


class PromptCache:
    """One model's key/value cache of every prompt of a search but its last token, computed once."""

    def __init__(self, model: Any, prompt_ids: Sequence[Sequence[int]], pad_id: int):
        if any(len(p) < 1 for p in prompt_ids):
            raise ValueError("prompt_ids: an empty prompt has no last token to start from")
        self.config, self.device, self.pad_id = model.config, _device(model), pad_id
        self.last = [p[-1] for p in prompt_ids]
        self.width = max((len(p) - 1 for p in prompt_ids), default=0)
        ids, mask = _left_padded([list(p)[:-1] for p in prompt_ids], self.width, pad_id)
        self.ids = torch.tensor(ids, dtype=torch.long, device=self.device).reshape(len(prompt_ids), self.width)
        self.mask = torch.tensor(mask, dtype=torch.long, device=self.device).reshape(len(prompt_ids), self.width)
        self.layers: list[tuple[torch.Tensor, torch.Tensor]] = []
        if self.width:
            with torch.inference_mode():  # the backbone: a token-classification head returns no cache
                positions = _positions(self.mask)
                cache = model.base_model(input_ids=self.ids, attention_mask=self.mask, position_ids=positions,
                                         use_cache=True).past_key_values  # fmt: skip
            self.layers = [(layer.keys, layer.values) for layer in cache.layers]

    def rows(self, requests: Sequence[Request]) -> tuple[torch.Tensor, torch.Tensor, DynamicCache | None]:
        """(ids, attention mask, cache) of the rows prompt + state of ``requests``; the cache holds the prompts."""
        tails = [[self.last[p], *state] for p, state in requests]  # prompt index p, state ids
        tail_ids, tail_mask = _left_padded(tails, max(map(len, tails)), self.pad_id)
        index = torch.tensor([p for p, _ in requests], dtype=torch.long, device=self.device)
        ids = torch.cat([self.ids[index], torch.tensor(tail_ids, dtype=torch.long, device=self.device)], dim=1)
        mask = torch.cat([self.mask[index], torch.tensor(tail_mask, dtype=torch.long, device=self.device)], dim=1)
        if not self.layers:
            return ids, mask, None
        cache = DynamicCache([(k.index_select(0, index), v.index_select(0, index)) for k, v in self.layers],
                             config=self.config)  # fmt: skip
        return ids, mask, cache


def _positions(mask: torch.Tensor) -> torch.Tensor:
    """Each real token's position counted over the real tokens before it (padding anywhere is skipped)."""
    return (mask.long().cumsum(-1) - 1).clamp(min=0)


class HFStepExpander(StepExpander):
    """Samples ``k`` next reasoning steps per state with ``model.generate`` (an ``expand`` of ``beam``)."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        delimiters: Sequence[str],
        step_max_tokens: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int | None = None,
        eos_ids: Collection[int] | None = None,
        max_tokens: int | None = None,
        delimiter_ids: Collection[int] | None = None,
    ):
        eos_ids = eos_token_ids(model, tokenizer) if eos_ids is None else eos_ids
        if delimiter_ids is None:
            delimiter_ids = delimiter_token_ids(tokenizer, delimiters)
        super().__init__(step_max_tokens, temperature, top_p, seed, eos_ids, max_tokens, delimiter_ids)
        self.model = model.eval()
        pad = tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else min(self.eos_ids, default=0)

    def bind(self, prompt_ids: Sequence[Sequence[int]]):
        """The ``expand(requests, k)`` callable of ``value_beam`` for these prompts, on one :class:`PromptCache`."""
        return partial(self._expand, PromptCache(self.model, prompt_ids, self.pad_id))

    def expand(
        self, prompt_ids: Sequence[Sequence[int]], requests: Sequence[Request], k: int
    ) -> list[list[tuple[tuple[int, ...], bool]]]:
        """Per request ``(prompt_index, state_ids)``, ``k`` continuations ``(new_ids, finished)``: one batch."""
        return self._expand(PromptCache(self.model, prompt_ids, self.pad_id), requests, k)

    def _generate(self, cache: PromptCache, requests: Sequence[Request], budgets: Sequence[int], k: int):
        """``k`` sampled continuations of each request's row (padded): the rows are read once, then one ``generate``."""
        greedy, max_new_tokens = self.greedy, max(budgets)
        copies = 1 if greedy else k
        ids, mask, past = cache.rows(requests)
        if past is not None and ids.shape[1] - cache.width > 1:  # the tails but their last column (a real token)
            with torch.inference_mode():
                self.model.base_model(input_ids=ids[:, cache.width : -1], attention_mask=mask[:, :-1],
                                      position_ids=_positions(mask)[:, cache.width : -1], past_key_values=past,
                                      use_cache=True)  # fmt: skip
        if copies > 1:
            ids, mask = ids.repeat_interleave(copies, dim=0), mask.repeat_interleave(copies, dim=0)
            if past is not None:
                past.batch_repeat_interleave(copies)
        options: dict[str, Any] = {"max_new_tokens": max_new_tokens, "pad_token_id": self.pad_id}
        if past is not None:
            options["past_key_values"] = past
        if self.eos_ids:
            options["eos_token_id"] = sorted(self.eos_ids)
        if self.delimiter_ids:
            options["stopping_criteria"] = StoppingCriteriaList([_StopAfter(self.delimiter_ids)])
        if greedy:
            options.update(do_sample=False)
        else:
            options.update(do_sample=True, temperature=self.temperature, top_p=self.top_p, top_k=0)
            if self.seed is not None:
                torch.manual_seed(batch_seed(self.seed, self.calls))
        with torch.inference_mode():
            output = self.model.generate(input_ids=ids, attention_mask=mask, **options)
        new = output[:, ids.shape[1] :].tolist()
        if greedy:
            return [[row] * k for row in new]
        return [new[r * k : (r + 1) * k] for r in range(len(requests))]


class HFValueScorer:
    """V(s) of token-id states from a one-label ``AutoModelForTokenClassification`` (a ``value`` of ``beam``)."""

    def __init__(self, value_model: Any, eos_ids: Collection[int] | None = None, pad_id: int = 0):
        if getattr(value_model.config, "num_labels", 1) != 1:
            raise ValueError(
                f"value_model: {value_model.config.num_labels} labels; a value model has one "
                "(rg_verl.oreo.value_init.prepare_value_model writes such a folder)"
            )
        self.model = value_model.eval()
        self.eos_ids = frozenset(eos_token_ids(value_model) if eos_ids is None else eos_ids)
        self.pad_id = pad_id

    def bind(self, prompt_ids: Sequence[Sequence[int]]):
        """The ``value(requests)`` callable of ``value_beam`` for these prompts, on one :class:`PromptCache`."""
        return partial(self._values, PromptCache(self.model, prompt_ids, self.pad_id))

    def values(self, prompt_ids: Sequence[Sequence[int]], requests: Sequence[Request]) -> list[float]:
        """V of each ``(prompt_index, state_ids)``, in one forward over the states on the prompts' cache."""
        return self._values(PromptCache(self.model, prompt_ids, self.pad_id), requests)

    def _values(self, cache: PromptCache, requests: Sequence[Request]) -> list[float]:
        if not requests:
            return []
        ids, mask, past = cache.rows(requests)
        tail = ids[:, cache.width :]
        with torch.inference_mode():
            logits = self.model(input_ids=tail, attention_mask=mask, position_ids=_positions(mask)[:, cache.width :],
                                past_key_values=past, use_cache=past is not None).logits[..., 0]  # fmt: skip
        # the tail is left-padded: a state's last token (the prompt's for the empty state) is its last column
        last = tail.shape[1] - 1
        columns = [last - 1 if state and state[-1] in self.eos_ids else last for _, state in requests]
        index = torch.tensor(columns, device=tail.device)
        return logits[torch.arange(len(requests), device=tail.device), index].float().tolist()
