"""Local generation with transformers: batches of prompts, left-padded, the model's chat template."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from tqdm.auto import tqdm

from rg_verl.common.hf_generate import batch_seed, eos_token_ids, plain_generation_config, response_length
from rg_verl.evaluation.backends.base import Backend, Completion, Messages, Sampling

__all__ = ["HFBackend", "batch_seed", "prompt_token_ids"]

logger = logging.getLogger(__name__)


def prompt_token_ids(tokenizer: Any, messages: Messages, chat_template_kwargs: Mapping | None = None) -> list[int]:
    """The token ids of a chat prompt with the generation prompt, as verl's rollout makes them."""
    ids = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, **dict(chat_template_kwargs or {})
    )
    if isinstance(ids, Mapping):  # transformers 5 answers a BatchEncoding
        ids = ids["input_ids"]
    return [int(i) for i in ids]


class HFBackend(Backend):
    """``AutoModelForCausalLM.generate`` over length-sorted batches, sampling as vLLM does, seeded per batch."""

    def __init__(self, config) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.batch_size = config.batch_size
        device = config.device if config.device != "auto" else "cuda" if torch.cuda.is_available() else "cpu"
        dtype = config.dtype if config.dtype == "auto" else getattr(torch, config.dtype)
        self.tokenizer = AutoTokenizer.from_pretrained(config.model_path, padding_side="left")
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        model = AutoModelForCausalLM.from_pretrained(config.model_path, **{"dtype": dtype, **config.engine_kwargs})
        self.model = model.to(device).eval()
        plain_generation_config(self.model)  # the folder's sampling defaults would not apply on vllm
        self.device = device
        self.chat_template_kwargs = dict(getattr(config, "chat_template_kwargs", None) or {})
        self.eos_ids = list(eos_token_ids(self.model, self.tokenizer))
        logger.info("hf backend: %s on %s (%s)", config.model_path, device, self.model.dtype)

    @classmethod
    def default_save_every(cls, config) -> int:
        return config.batch_size

    def prompt_ids(self, messages: Messages) -> list[int]:
        """The ids this backend conditions on for a chat prompt (:func:`prompt_token_ids`)."""
        return prompt_token_ids(self.tokenizer, messages, self.chat_template_kwargs)

    def _padded(self, rows: list[list[int]]):
        """``rows`` left-padded into ``input_ids`` and ``attention_mask`` tensors on the model's device."""
        import torch

        width, pad = max(map(len, rows)), self.tokenizer.pad_token_id
        ids = torch.tensor([[pad] * (width - len(row)) + row for row in rows], dtype=torch.long)
        mask = torch.tensor([[0] * (width - len(row)) + [1] * len(row) for row in rows], dtype=torch.long)
        return {"input_ids": ids.to(self.device), "attention_mask": mask.to(self.device)}

    def generate(self, prompts: list[Messages], n: int, sampling: Sampling) -> list[list[Completion]]:
        import torch

        encoded_prompts = [self.prompt_ids(p) for p in prompts]
        order = sorted(range(len(prompts)), key=lambda i: len(encoded_prompts[i]))
        greedy = sampling.greedy
        options = {"max_new_tokens": sampling.max_tokens, "pad_token_id": self.tokenizer.pad_token_id}
        if self.eos_ids:
            options["eos_token_id"] = self.eos_ids
        if greedy:
            options.update(do_sample=False, num_return_sequences=1)
        else:
            options.update(do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p, top_k=0,
                           num_return_sequences=n)  # fmt: skip
        results: list[list[Completion]] = [[] for _ in prompts]
        starts = range(0, len(order), self.batch_size)
        bar = tqdm(starts, desc="hf generate", unit="batch", leave=False, disable=len(starts) < 2)
        for number, start in enumerate(bar):
            batch = order[start : start + self.batch_size]
            encoded = self._padded([encoded_prompts[i] for i in batch])
            if sampling.seed is not None and not greedy:
                torch.manual_seed(batch_seed(sampling.seed, number))
            with torch.inference_mode():
                output = self.model.generate(**encoded, **options)
            rows = output[:, encoded["input_ids"].shape[1] :].tolist()
            per_prompt = 1 if greedy else n
            for b, i in enumerate(batch):
                prompt = tuple(encoded_prompts[i])
                for row in rows[b * per_prompt : (b + 1) * per_prompt]:
                    length = response_length(row, self.eos_ids)
                    text = self.tokenizer.decode(row[:length], skip_special_tokens=True)
                    results[i].append(Completion(text, length, tuple(row[:length]), prompt))
                if greedy:
                    results[i] = results[i] * n
        return results

    def close(self) -> None:
        self.model = None
