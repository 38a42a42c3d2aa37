"""The value modes of ``decoding`` as backends: the policy (hf or vllm) with an OREO value model beside it."""

from __future__ import annotations

import logging
from typing import Any

from rg_verl.common.hf_generate import saved_eos_token_ids
from rg_verl.evaluation.backends.base import Backend, Completion, Messages, Sampling
from rg_verl.evaluation.backends.hf import HFBackend, prompt_token_ids
from rg_verl.evaluation.backends.vllm import VLLMBackend
from rg_verl.search.beam import Beam, value_beam, value_rerank
from rg_verl.search.hf import HFStepExpander, HFValueScorer
from rg_verl.search.steps import StepExpander, delimiter_token_ids
from rg_verl.search.vllm import VLLMStepExpander

__all__ = ["HFValueSearchBackend", "VLLMValueSearchBackend", "ValueSearchBackend", "VLLM_MEMORY_SHARE"]

logger = logging.getLogger(__name__)

# vLLM's GPU share in the value modes: the rest holds the value model and its caches (vLLM's 0.9 leaves too little)
VLLM_MEMORY_SHARE = 0.5


class ValueSearchBackend(Backend):
    """The value modes' search loop; a subclass loads the policy and the value model and makes ``_step_expander``."""

    batch_size: int
    tokenizer: Any
    eos_ids: list[int]

    def _load_value_model(self, config, device: str, dtype: Any) -> None:
        from transformers import AutoModelForTokenClassification

        self.decoding = config.decoding
        model = AutoModelForTokenClassification.from_pretrained(self.decoding.value_model, dtype=dtype)
        self.value_model = model.to(device)
        pad = self.tokenizer.pad_token_id
        self.scorer = HFValueScorer(self.value_model, eos_ids=self.eos_ids, pad_id=pad if pad is not None else 0)
        self.delimiter_ids = delimiter_token_ids(self.tokenizer, self.decoding.step_delimiters)
        self.searched = {"continuations": 0, "tokens": 0}  # what the searches generated so far
        logger.info("%s with value model %s on %s", self.decoding.mode, self.decoding.value_model, device)

    def _step_expander(
        self, sampling: Sampling, step_tokens: int, delimiter_ids: frozenset[int], seed: int | None
    ) -> StepExpander:
        raise NotImplementedError

    def _expander(self, sampling: Sampling, whole: bool) -> StepExpander:
        """The search's step expander; ``whole``: steps are whole responses (``value_rerank``)."""
        seed = self.decoding.seed if sampling.seed is None else sampling.seed
        if whole:
            return self._step_expander(sampling, sampling.max_tokens, frozenset(), seed)
        return self._step_expander(sampling, self.decoding.step_max_tokens, self.delimiter_ids, seed)

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


class HFValueSearchBackend(ValueSearchBackend, HFBackend):
    """The value modes on transformers: the policy and the value model on ``config.device``."""

    def __init__(self, config) -> None:
        HFBackend.__init__(self, config)
        self._load_value_model(config, self.device, self.model.dtype)

    def _step_expander(self, sampling, step_tokens, delimiter_ids, seed) -> HFStepExpander:
        return HFStepExpander(
            self.model, self.tokenizer, (), step_tokens, temperature=sampling.temperature, top_p=sampling.top_p,
            seed=seed, eos_ids=self.eos_ids, max_tokens=sampling.max_tokens, delimiter_ids=delimiter_ids,
        )  # fmt: skip


class VLLMValueSearchBackend(ValueSearchBackend, VLLMBackend):
    """The value modes on vLLM, which takes :data:`VLLM_MEMORY_SHARE` of the GPU unless ``engine_kwargs`` say else."""

    def __init__(self, config) -> None:
        import torch

        VLLMBackend.__init__(self, config)
        self.batch_size = config.batch_size
        self.tokenizer = self.llm.get_tokenizer()
        self.eos_ids = list(saved_eos_token_ids(config.model_path, self.tokenizer))
        device = config.device if config.device != "auto" else "cuda" if torch.cuda.is_available() else "cpu"
        dtype = config.dtype if config.dtype == "auto" else getattr(torch, config.dtype)
        self._load_value_model(config, device, dtype)

    def engine_kwargs(self, config) -> dict:
        return {"gpu_memory_utilization": VLLM_MEMORY_SHARE, **super().engine_kwargs(config)}

    def prompt_ids(self, messages: Messages) -> list[int]:
        return prompt_token_ids(self.tokenizer, messages, self.chat_template_kwargs)

    def _step_expander(self, sampling, step_tokens, delimiter_ids, seed) -> VLLMStepExpander:
        return VLLMStepExpander(
            self.llm, step_tokens, temperature=sampling.temperature, top_p=sampling.top_p, seed=seed,
            eos_ids=self.eos_ids, max_tokens=sampling.max_tokens, delimiter_ids=delimiter_ids,
        )  # fmt: skip
