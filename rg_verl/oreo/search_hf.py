"""The callables of ``rg_verl.oreo.beam`` with transformers: a step expander and a value scorer.

- :class:`HFStepExpander` samples reasoning steps with ``model.generate``, one left-padded batch per call;
- :class:`HFValueScorer` reads V(s) from a one-label ``AutoModelForTokenClassification``, one padded
  forward per call.

Both work on token ids (prompt ids + response ids) and never re-tokenise text. Both take the prompts'
ids through ``bind``, which answers the callable :func:`rg_verl.oreo.beam.value_beam` expects::

    answers = value_beam(prompts, expander.bind(prompt_ids), scorer.bind(prompt_ids),
                         beam_width=3, max_steps=20, n_answers=1)

**Steps.** A step ends after the first token whose text, decoded alone, holds one of the delimiters: the
rule ``rg_verl.oreo.batches.step_starts`` uses to cut training responses into steps, so the search moves
in the steps the value model was trained on. The rule is applied inside generation (a stopping criterion
over the delimiter tokens' ids, so a row stops at once) and again when cutting the rows, which makes the
cut exact: a new step ends right after its delimiter token, at end of sequence, or at its token budget.

**Values.** The value model's output at position i is V of the state made of the tokens up to and including
i (``rg_verl.oreo.batches.unbind_responses``: V(s_t) sits at the position before response token t). So the
value of a state is read at the state's last token (the prompt's last token for the empty response). A
state that ends with end of sequence is scored at the position before that token: the state before the last
action, the last one training fits a value to (the state after end of sequence never occurs in training).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from functools import partial
from typing import Any

import torch
from transformers import StoppingCriteria, StoppingCriteriaList

from rg_verl.generation import batch_seed, eos_token_ids

__all__ = ["HFStepExpander", "HFValueScorer", "delimiter_token_ids"]

Request = tuple[int, Sequence[int]]


def delimiter_token_ids(tokenizer: Any, delimiters: Sequence[str]) -> frozenset[int]:
    """The ids of the tokenizer's tokens whose text, decoded alone, holds one of ``delimiters``."""
    if any(not d for d in delimiters):
        raise ValueError(f"delimiters: {list(delimiters)!r} holds an empty string, which every text holds; drop it")
    if not delimiters:
        return frozenset()
    texts = tokenizer.batch_decode([[i] for i in range(len(tokenizer))])  # the whole vocabulary: once per search
    return frozenset(i for i, text in enumerate(texts) if any(d in text for d in delimiters))


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


class HFStepExpander:
    """Samples ``k`` next reasoning steps per state with ``model.generate`` (an ``expand`` of ``beam``).

    Args:
        model: an ``AutoModelForCausalLM`` (put in eval mode here).
        tokenizer: its tokenizer, to find the delimiter tokens and the pad id.
        delimiters: the texts that end a step (OREO: ``["\\n"]``); empty: a step runs to end of sequence or
            its budget, so one call samples whole responses (for ``value_rerank``).
        step_max_tokens: the most tokens per step.
        temperature, top_p: sampling as in the ``hf`` evaluation backend (top_k off); temperature 0 is
            greedy, and its ``k`` continuations are copies of one.
        seed: with sampling, torch's global generator is seeded before call n from (seed, n)
            (``rg_verl.generation.batch_seed``), so the same calls give the same steps.
        eos_ids: the ids that end a response; default ``rg_verl.generation.eos_token_ids(model, tokenizer)``.
        max_tokens: the most response tokens in all (the total budget); a step that reaches it is finished.
        delimiter_ids: :func:`delimiter_token_ids` of ``delimiters``, where the caller keeps them (finding them
            decodes the whole vocabulary).
    """

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
        if step_max_tokens < 1:
            raise ValueError(f"step_max_tokens: {step_max_tokens} is below 1; allow a step at least one token")
        if max_tokens is not None and max_tokens < 1:
            raise ValueError(f"max_tokens: {max_tokens} is below 1; allow at least one token, or pass None")
        if temperature < 0 or not 0 < top_p <= 1:
            raise ValueError(f"temperature {temperature}, top_p {top_p}: need temperature >= 0 and 0 < top_p <= 1")
        self.model = model.eval()
        self.eos_ids = frozenset(eos_token_ids(model, tokenizer) if eos_ids is None else eos_ids)
        if delimiter_ids is None:
            delimiter_ids = delimiter_token_ids(tokenizer, delimiters)
        self.delimiter_ids = frozenset(delimiter_ids)
        pad = tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else min(self.eos_ids, default=0)
        self.step_max_tokens, self.max_tokens = step_max_tokens, max_tokens
        self.temperature, self.top_p, self.seed = temperature, top_p, seed
        self.calls = 0
        self.continuations = self.tokens = 0  # made so far, and their tokens

    def bind(self, prompt_ids: Sequence[Sequence[int]]):
        """The ``expand(requests, k)`` callable of ``value_beam`` for these prompts (prompt index → ids)."""
        return partial(self.expand, [list(ids) for ids in prompt_ids])

    def _budget(self, state_length: int) -> int:
        if self.max_tokens is None:
            return self.step_max_tokens
        return max(0, min(self.step_max_tokens, self.max_tokens - state_length))

    def expand(
        self, prompt_ids: Sequence[Sequence[int]], requests: Sequence[Request], k: int
    ) -> list[list[tuple[tuple[int, ...], bool]]]:
        """Per request ``(prompt_index, state_ids)``, ``k`` continuations ``(new_ids, finished)``: one batch.

        A state with no budget left gets ``k`` empty, finished continuations without generating.
        """
        budgets = [self._budget(len(state)) for _, state in requests]
        out: list[list[tuple[tuple[int, ...], bool]]] = [[((), True)] * k for _ in requests]
        todo = [i for i, budget in enumerate(budgets) if budget > 0]
        if not todo:
            return out
        rows = [list(prompt_ids[requests[i][0]]) + list(requests[i][1]) for i in todo]
        samples = self._generate(rows, max(budgets[i] for i in todo), k)
        for i, row_samples in zip(todo, samples, strict=True):
            out[i] = [self._cut(sample, budgets[i], len(requests[i][1])) for sample in row_samples]
            self.continuations += k
            self.tokens += sum(len(new) for new, _ in out[i])
        return out

    def _cut(self, tokens: Sequence[int], budget: int, state_length: int) -> tuple[tuple[int, ...], bool]:
        """A generated row's step: up to and including the first end-of-sequence or delimiter token, within
        ``budget`` (what follows is padding or another row's budget); finished at end of sequence or when the
        response reaches ``max_tokens``."""
        new = list(tokens[:budget])
        for i, token in enumerate(new):
            if token in self.eos_ids:
                return tuple(new[: i + 1]), True
            if token in self.delimiter_ids:
                new = new[: i + 1]
                break
        spent = self.max_tokens is not None and state_length + len(new) >= self.max_tokens
        return tuple(new), spent

    def _generate(self, rows: list[list[int]], max_new_tokens: int, k: int) -> list[list[list[int]]]:
        """``k`` sampled continuations of each row (left-padded into one ``generate`` call), padded tokens kept."""
        device = _device(self.model)
        width = max(map(len, rows))
        ids = torch.tensor([[self.pad_id] * (width - len(r)) + r for r in rows], dtype=torch.long, device=device)
        mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], dtype=torch.long, device=device)
        greedy = self.temperature <= 0
        options: dict[str, Any] = {"max_new_tokens": max_new_tokens, "pad_token_id": self.pad_id}
        if self.eos_ids:
            options["eos_token_id"] = sorted(self.eos_ids)
        if self.delimiter_ids:
            options["stopping_criteria"] = StoppingCriteriaList([_StopAfter(self.delimiter_ids)])
        if greedy:
            options.update(do_sample=False, num_return_sequences=1)
        else:
            options.update(
                do_sample=True, temperature=self.temperature, top_p=self.top_p, top_k=0, num_return_sequences=k
            )
            if self.seed is not None:
                torch.manual_seed(batch_seed(self.seed, self.calls))
        self.calls += 1
        with torch.inference_mode():
            output = self.model.generate(input_ids=ids, attention_mask=mask, **options)
        new = output[:, width:].tolist()
        if greedy:
            return [[row] * k for row in new]
        return [new[r * k : (r + 1) * k] for r in range(len(rows))]


class HFValueScorer:
    """V(s) of token-id states from a one-label ``AutoModelForTokenClassification`` (a ``value`` of ``beam``).

    One right-padded forward per call: with padding on the right, every real token keeps its positions
    (0, 1, ...) and attends to the same tokens as alone, so no position ids are needed and padding does not
    change a value. Which position is read: see the module docstring.

    Args:
        value_model: the value model (put in eval mode here); ``logits[..., 0]`` is V.
        eos_ids: the ids that end a response (default ``rg_verl.generation.eos_token_ids(value_model)``);
            pass the expander's, so both agree on which states are finished.
        pad_id: the id that fills the padding (any id: padded positions are masked and never read).
    """

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
        """The ``value(requests)`` callable of ``value_beam`` for these prompts (prompt index → ids)."""
        return partial(self.values, [list(ids) for ids in prompt_ids])

    def position(self, prompt_length: int, state: Sequence[int]) -> int:
        """Where V of ``state`` is read in the row prompt + state: its last token, or the one before a final
        end-of-sequence token."""
        if prompt_length < 1:
            raise ValueError("prompt_ids: an empty prompt has no position to read the empty state's value at")
        last = prompt_length + len(state) - 1
        return last - 1 if state and state[-1] in self.eos_ids else last

    def values(self, prompt_ids: Sequence[Sequence[int]], requests: Sequence[Request]) -> list[float]:
        """V of each ``(prompt_index, state_ids)``, in one right-padded forward."""
        if not requests:
            return []
        rows = [list(prompt_ids[p]) + list(state) for p, state in requests]
        positions = [self.position(len(prompt_ids[p]), state) for p, state in requests]
        device = _device(self.model)
        width = max(map(len, rows))
        ids = torch.tensor([r + [self.pad_id] * (width - len(r)) for r in rows], dtype=torch.long, device=device)
        mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows], dtype=torch.long, device=device)
        with torch.inference_mode():
            logits = self.model(input_ids=ids, attention_mask=mask).logits[..., 0]
        index = torch.tensor(positions, device=device)
        return logits[torch.arange(len(rows), device=device), index].float().tolist()
