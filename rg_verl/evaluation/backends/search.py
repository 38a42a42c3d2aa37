"""The value modes of ``decoding`` as a backend: the hf backend's policy with an OREO value model beside it.

:class:`ValueSearchBackend` is what :func:`rg_verl.evaluation.backends.create_backend` builds when
``decoding.mode`` is ``value_beam`` or ``value_rerank`` (:mod:`rg_verl.evaluation.decoding`). It loads the
policy as the ``hf`` backend does (same chat template, prompt ids, end-of-sequence ids and dtype) and the
value model with ``AutoModelForTokenClassification``, and answers ``generate`` like any backend: per
prompt, ``n`` completions, here the best ``n`` by value. Every ``batch_size`` prompts make one search; each
of its steps is one batched ``generate`` call for every beam of every prompt and one value forward
(:mod:`rg_verl.oreo.search_hf`). States stay token ids; only the final answers are decoded.
"""

from __future__ import annotations

import logging
from typing import Any

from rg_verl.evaluation.backends.base import Completion, Messages, Sampling
from rg_verl.evaluation.backends.hf import HFBackend
from rg_verl.oreo.beam import Beam, value_beam, value_rerank
from rg_verl.oreo.search_hf import HFStepExpander, HFValueScorer, delimiter_token_ids

__all__ = ["ValueSearchBackend"]

logger = logging.getLogger(__name__)


class ValueSearchBackend(HFBackend):
    """``value_beam`` or ``value_rerank`` on transformers, the policy and the value model on one device."""

    def __init__(self, config) -> None:
        from transformers import AutoModelForTokenClassification

        super().__init__(config)
        self.decoding = config.decoding
        self.value_model = AutoModelForTokenClassification.from_pretrained(
            self.decoding.value_model, dtype=self.model.dtype
        ).to(self.device)
        pad = self.tokenizer.pad_token_id
        self.scorer = HFValueScorer(self.value_model, eos_ids=self.eos_ids, pad_id=pad)
        self.delimiter_ids = delimiter_token_ids(self.tokenizer, self.decoding.step_delimiters)
        self.searched = {"continuations": 0, "tokens": 0}  # what the searches generated so far
        logger.info("%s with value model %s", self.decoding.mode, self.decoding.value_model)

    def _expander(self, sampling: Sampling, whole: bool) -> Any:
        decoding = self.decoding
        return HFStepExpander(
            self.model, self.tokenizer, [] if whole else decoding.step_delimiters,
            sampling.max_tokens if whole else decoding.step_max_tokens, temperature=sampling.temperature,
            top_p=sampling.top_p, seed=decoding.seed if sampling.seed is None else sampling.seed,
            eos_ids=self.eos_ids, max_tokens=sampling.max_tokens,
            delimiter_ids=frozenset() if whole else self.delimiter_ids,
        )  # fmt: skip

    def generate(self, prompts: list[Messages], n: int, sampling: Sampling) -> list[list[Completion]]:
        results: list[list[Completion]] = []
        for start in range(0, len(prompts), self.batch_size):
            ids = [self.prompt_ids(p) for p in prompts[start : start + self.batch_size]]
            decoding = self.decoding
            expander = self._expander(sampling, whole=decoding.mode == "value_rerank")
            if decoding.mode == "value_beam":
                answers = value_beam(ids, expander.bind(ids), self.scorer.bind(ids), beam_width=decoding.beam_width,
                                     max_steps=decoding.max_steps, n_answers=n)  # fmt: skip
            else:
                answers = value_rerank(ids, expander.bind(ids), self.scorer.bind(ids), k=decoding.samples, n_answers=n)
            self.searched["continuations"] += expander.continuations
            self.searched["tokens"] += expander.tokens
            for prompt, beams in zip(ids, answers, strict=True):
                if len(beams) < n:  # the search ran out of candidates: its best answers, repeated
                    logger.warning("%s found %d of %d answers; repeating them", decoding.mode, len(beams), n)
                    beams = [beams[i % len(beams)] for i in range(n)] if beams else [Beam((), True, 0.0)] * n
                results.append([self._completion(prompt, beam.ids) for beam in beams])
        return results

    def _completion(self, prompt: list[int], ids: tuple[int, ...]) -> Completion:
        text = self.tokenizer.decode(list(ids), skip_special_tokens=True)
        return Completion(text, len(ids), ids, tuple(prompt))

    def close(self) -> None:
        super().close()
        self.value_model = None
