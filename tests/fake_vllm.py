"""A stand-in ``vllm`` module for CPU tests: ``LLM.generate`` over token ids, run by a transformers model.

It keeps the vLLM behaviour the project relies on: one ``RequestOutput`` per prompt with ``n`` outputs,
generation stops right after a token of ``stop_token_ids`` (kept in ``token_ids``) or at ``max_tokens``,
temperature 0 is greedy, and a request with a ``seed`` samples from its own generator, so its outputs depend
on neither the other requests nor the call. Sampling is plain softmax sampling at the temperature (top_p 1).
"""

from __future__ import annotations

import importlib.machinery
import types

import torch


class SamplingParams:
    def __init__(self, n=1, temperature=1.0, top_p=1.0, max_tokens=16, stop_token_ids=None, seed=None, **rest):
        self.n, self.temperature, self.top_p, self.max_tokens = n, temperature, top_p, max_tokens
        self.stop_token_ids, self.seed, self.rest = list(stop_token_ids or []), seed, rest


class LLM:
    """``vllm.LLM`` of a transformers causal LM folder; records every ``generate`` call and the engine kwargs."""

    instances: list[LLM] = []

    def __init__(self, model, dtype="auto", **kwargs):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.model = AutoModelForCausalLM.from_pretrained(model).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(model)
        self.kwargs = kwargs
        self.calls: list[tuple[list[dict], list[SamplingParams]]] = []
        LLM.instances.append(self)

    def get_tokenizer(self):
        return self.tokenizer

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
                if p.temperature <= 0:
                    token = int(logits.argmax())
                else:
                    probs = torch.softmax(logits / p.temperature, dim=-1)
                    token = int(torch.multinomial(probs, 1, generator=generator))
                ids.append(token)
                new.append(token)
                if token in p.stop_token_ids:
                    break
        return new


def module() -> types.ModuleType:
    """A fresh ``vllm`` module (with a spec, so ``importlib.util.find_spec`` finds it in ``sys.modules``)."""
    fake = types.ModuleType("vllm")
    fake.__spec__ = importlib.machinery.ModuleSpec("vllm", None)
    fake.LLM, fake.SamplingParams = LLM, SamplingParams
    LLM.instances = []
    return fake
