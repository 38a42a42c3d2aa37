"""A stand-in ``vllm`` module for CPU tests: ``LLM.generate`` over token ids, run by a transformers model.

It keeps the vLLM behaviour the project relies on: one ``RequestOutput`` per prompt with ``n`` outputs,
generation stops right after a token of ``stop_token_ids`` or an end-of-sequence id (kept in ``token_ids``) or
at ``max_tokens``, temperature 0 is greedy, and a request with a ``seed`` samples from its own generator, so
its outputs depend on neither the other requests nor the call. Sampling is plain softmax sampling at the
temperature (top_p 1).

``SamplingParams`` refuses what vLLM's own refuses (``vllm/sampling_params.py``, ``_verify_args`` and
``_verify_greedy_sampling`` in vllm 0.28): ``n`` below 1, ``n > 1`` when greedy (temperature below 1e-5), a
temperature outside [0, 2], ``top_p`` outside (0, 1], ``max_tokens`` below 1. ``LLM.chat`` renders the
tokenizer's chat template (with ``chat_template_kwargs``) into ids and generates from them, as vLLM does.
"""

from __future__ import annotations

import importlib.machinery
import types

import torch

# vLLM's temperature below which sampling is greedy (``_SAMPLING_EPS``)
GREEDY_BELOW = 1e-5


class SamplingParams:
    def __init__(self, n=1, temperature=1.0, top_p=1.0, max_tokens=16, stop_token_ids=None, seed=None, **rest):
        self.n, self.temperature, self.top_p, self.max_tokens = n, temperature, top_p, max_tokens
        self.stop_token_ids, self.seed, self.rest = list(stop_token_ids or []), seed, rest
        if n < 1:
            raise ValueError(f"n must be at least 1, got {n}.")
        if not 0.0 <= temperature <= 2.0:
            raise ValueError(f"temperature must be in [0, 2], got {temperature}.")
        if not 0.0 < top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}.")
        if max_tokens is not None and max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {max_tokens}.")
        if temperature < GREEDY_BELOW and n > 1:
            raise ValueError(f"n must be 1 when using greedy sampling, got {n}.")


class LLM:
    """``vllm.LLM`` of a transformers causal LM folder; records every ``generate`` call and the engine kwargs."""

    instances: list[LLM] = []

    def __init__(self, model, dtype="auto", **kwargs):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.model = AutoModelForCausalLM.from_pretrained(model).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(model)
        self.kwargs = kwargs
        # vLLM ends a sequence at the model's end-of-sequence ids too, besides a request's stop_token_ids
        from rg_verl.common.hf_generate import eos_token_ids

        self.eos_ids = set(eos_token_ids(self.model, self.tokenizer))
        self.calls: list[tuple[list[dict], list[SamplingParams]]] = []
        LLM.instances.append(self)

    def get_tokenizer(self):
        return self.tokenizer

    def chat(self, messages, params, use_tqdm=True, chat_template_kwargs=None):
        """``LLM.chat``: each conversation rendered by the chat template with the generation prompt, then generated."""
        prompts = []
        for conversation in messages:
            ids = self.tokenizer.apply_chat_template(
                conversation, add_generation_prompt=True, tokenize=True, **(chat_template_kwargs or {})
            )
            ids = ids["input_ids"] if hasattr(ids, "keys") else ids
            prompts.append({"prompt_token_ids": [int(i) for i in ids]})
        return self.generate(prompts, params, use_tqdm=use_tqdm)

    def generate(self, prompts, params, use_tqdm=True):
        params = params if isinstance(params, list) else [params] * len(prompts)
        self.calls.append((prompts, params))
        outputs = []
        for prompt, p in zip(prompts, params, strict=True):
            generator = torch.Generator().manual_seed(p.seed if p.seed is not None else torch.seed() % 2**31)
            samples = [self._sample(prompt["prompt_token_ids"], p, generator) for _ in range(p.n)]
            outputs.append(types.SimpleNamespace(
                prompt_token_ids=list(prompt["prompt_token_ids"]),
                outputs=[types.SimpleNamespace(token_ids=s, text=self.tokenizer.decode(s)) for s in samples],
            ))  # fmt: skip
        return outputs

    def _sample(self, prompt: list[int], p: SamplingParams, generator: torch.Generator) -> list[int]:
        ids, new = list(prompt), []
        with torch.inference_mode():
            for _ in range(p.max_tokens):
                logits = self.model(torch.tensor([ids])).logits[0, -1].float()
                if p.temperature < GREEDY_BELOW:
                    token = int(logits.argmax())
                else:
                    probs = torch.softmax(logits / p.temperature, dim=-1)
                    token = int(torch.multinomial(probs, 1, generator=generator))
                ids.append(token)
                new.append(token)
                if token in p.stop_token_ids or token in self.eos_ids:
                    break
        return new


def module() -> types.ModuleType:
    """A fresh ``vllm`` module (with a spec, so ``importlib.util.find_spec`` finds it in ``sys.modules``)."""
    fake = types.ModuleType("vllm")
    fake.__spec__ = importlib.machinery.ModuleSpec("vllm", None)
    fake.LLM, fake.SamplingParams = LLM, SamplingParams
    LLM.instances = []
    return fake
