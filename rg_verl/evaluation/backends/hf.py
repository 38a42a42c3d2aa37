"""Local generation with transformers: batches of prompts, left-padded, the model's chat template."""

from __future__ import annotations

import logging

from tqdm.auto import tqdm

from rg_verl.evaluation.backends.base import Backend, Completion, Messages, Sampling
from rg_verl.generation import eos_token_ids, response_length

logger = logging.getLogger(__name__)


class HFBackend(Backend):
    """``AutoModelForCausalLM.generate`` over batches of ``config.batch_size`` prompts.

    Each batch is one ``generate`` call that samples ``n`` sequences per prompt. Prompts are sorted
    by length first, so a batch wastes little on padding; results come back in the prompts' order.
    Sampling matches vLLM's: temperature and top_p only (top_k off); temperature 0 is greedy, and
    its ``n`` completions are copies of one.
    """

    def __init__(self, config) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.batch_size = config.batch_size
        device = config.device
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        dtype = config.dtype if config.dtype == "auto" else getattr(torch, config.dtype)
        self.tokenizer = AutoTokenizer.from_pretrained(config.model_path, padding_side="left")
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        kwargs = {"dtype": dtype, **config.engine_kwargs}
        self.model = AutoModelForCausalLM.from_pretrained(config.model_path, **kwargs).to(device).eval()
        self.device = device
        self.eos_ids = list(eos_token_ids(self.model, self.tokenizer))
        logger.info("hf backend: %s on %s (%s)", config.model_path, device, self.model.dtype)

    @classmethod
    def default_save_every(cls, config) -> int:
        return config.batch_size

    def _prompt_text(self, messages: Messages) -> str:
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def generate(self, prompts: list[Messages], n: int, sampling: Sampling) -> list[list[Completion]]:
        import torch

        texts = [self._prompt_text(p) for p in prompts]
        lengths = [len(ids) for ids in self.tokenizer(texts, add_special_tokens=False)["input_ids"]]
        order = sorted(range(len(texts)), key=lambda i: lengths[i])
        greedy = sampling.temperature <= 0
        options = {"max_new_tokens": sampling.max_tokens, "pad_token_id": self.tokenizer.pad_token_id}
        if self.eos_ids:
            options["eos_token_id"] = self.eos_ids
        if greedy:
            options.update(do_sample=False, num_return_sequences=1)
        else:
            options.update(
                do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p, top_k=0, num_return_sequences=n
            )
        results: list[list[Completion]] = [[] for _ in prompts]
        starts = range(0, len(order), self.batch_size)
        for start in tqdm(starts, desc="hf generate", unit="batch", leave=False, disable=len(starts) < 2):
            batch = order[start : start + self.batch_size]
            encoded = self.tokenizer(
                [texts[i] for i in batch], return_tensors="pt", padding=True, add_special_tokens=False
            ).to(self.device)
            with torch.inference_mode():
                output = self.model.generate(**encoded, **options)
            rows = output[:, encoded["input_ids"].shape[1] :].tolist()
            per_prompt = 1 if greedy else n
            for b, i in enumerate(batch):
                for row in rows[b * per_prompt : (b + 1) * per_prompt]:
                    length = response_length(row, self.eos_ids)
                    text = self.tokenizer.decode(row[:length], skip_special_tokens=True)
                    results[i].append(Completion(text=text, num_tokens=length))
                if greedy:
                    results[i] = results[i] * n
        return results

    def close(self) -> None:
        self.model = None
