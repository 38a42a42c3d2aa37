"""The ``hf`` rollout server: a Ray actor that generates with ``transformers``."""

import asyncio
import logging
import re
from dataclasses import dataclass, field
from typing import Any

import torch
from peft import PeftConfig, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM
from verl.utils.device import get_device_name
from verl.workers.rollout.replica import TokenOutput

from rg_verl.common.hf_generate import eos_token_ids, plain_generation_config, response_length
from rg_verl.common.names import PEFT_PREFIX
from rg_verl.hf_rollout.attention import attention_for
from rg_verl.hf_rollout.kv_cache import GrowingCache, growing_cache_for
from rg_verl.hf_rollout.prefix_cache import PrefixCache

logger = logging.getLogger(__name__)

# seconds a batch waits for more requests, renewed while they arrive (multi-turn tries come one by one)
BATCH_WINDOW_S = 0.02
MAX_BATCH_WAIT_S = 0.2


@dataclass
class _Request:
    prompt_ids: list[int]
    max_tokens: int
    want_logprobs: bool
    done: asyncio.Future = field(repr=False)


_PEFT_ADAPTER = "default"  # the adapter name get_peft_model gives, and the one verl trains
_ADAPTER_SUFFIX = re.compile(rf"\.(lora_\w+)\.{_PEFT_ADAPTER}(?=\.|$)")


def canonical_name(name: str) -> str:
    """One name per tensor, whichever layout verl sends it in."""
    name = name.removeprefix(PEFT_PREFIX).replace(".base_layer.", ".")
    return _ADAPTER_SUFFIX.sub(r".\1", name)


def sampling_key(sampling_params: dict[str, Any]) -> tuple[float, float, int]:
    """(temperature, top_p, top_k) in ``transformers`` terms; requests batch together only when equal."""
    temperature = float(sampling_params.get("temperature", 1.0))
    top_p = float(sampling_params.get("top_p", 1.0))
    top_k = int(sampling_params.get("top_k", -1) or -1)
    return temperature, top_p, max(top_k, 0)  # verl disables top-k with -1, transformers with 0


class HFRolloutServer:
    """Holds one copy of the policy and serves generation requests for a replica."""

    def __init__(
        self,
        model_path: str,
        prompt_length: int,
        response_length: int,
        max_num_seqs: int,
        seed: int,
        dtype: str = "float32",
        prefix_caching: bool = True,
    ):
        self.device = torch.device(get_device_name())
        torch.manual_seed(seed)
        self.model = AutoModelForCausalLM.from_pretrained(
            model_path, dtype=getattr(torch, dtype), attn_implementation=attention_for(self.device)
        ).to(self.device)
        self.model.eval()
        plain_generation_config(self.model)  # sample only with what verl's sampling params say
        self.eos_ids = frozenset(eos_token_ids(self.model))
        if not self.eos_ids:  # a response would have no end: verl needs one to score it
            raise ValueError(f"{model_path}: the model names no eos_token_id in its generation config or config")
        pad = self.model.generation_config.pad_token_id
        pad = pad if pad is not None else self.model.config.pad_token_id
        self.pad_id = pad if pad is not None else min(self.eos_ids)
        self.prompt_length = prompt_length
        self.response_length = response_length
        self.max_num_seqs = max_num_seqs
        self.prefix_cache = PrefixCache() if prefix_caching else None
        # None: the model has sliding-window layers and keeps transformers' default cache
        empty = growing_cache_for(self.model.config)
        self._cache_layers = len(empty.layers) if empty is not None else None
        self.global_steps: int | None = None
        self.weight_version = 0
        self._pending: dict[tuple, list[_Request]] = {}
        self._drainer: asyncio.Task | None = None
        self._lock = asyncio.Lock()

    def ready(self) -> bool:
        return True

    async def generate(
        self, prompt_ids: list[int], sampling_params: dict[str, Any], request_id: str, **_
    ) -> TokenOutput:
        """Generate one response; concurrent calls are batched into one forward loop."""
        budget = self.prompt_length + self.response_length - len(prompt_ids)
        max_tokens = min(int(sampling_params.get("max_tokens", self.response_length)), self.response_length, budget)
        if max_tokens < 1:
            raise ValueError(
                f"prompt of {len(prompt_ids)} tokens leaves no room to generate "
                f"(prompt_length={self.prompt_length}, response_length={self.response_length})"
            )
        request = _Request(
            prompt_ids=list(prompt_ids),
            max_tokens=max_tokens,
            want_logprobs=bool(sampling_params.get("logprobs", False)),
            done=asyncio.get_running_loop().create_future(),
        )
        self._pending.setdefault(sampling_key(sampling_params), []).append(request)
        if self._drainer is None or self._drainer.done():
            self._drainer = asyncio.create_task(self._drain())
        return await request.done

    async def _drain(self) -> None:
        """Serve pending requests, a batch at a time, until none are left."""
        await self._gather_requests()
        while self._pending:
            key, queue = next(iter(self._pending.items()))
            batch, rest = queue[: self.max_num_seqs], queue[self.max_num_seqs :]
            if rest:
                self._pending[key] = rest
            else:
                del self._pending[key]
            async with self._lock:  # never generate while weights are being replaced
                try:
                    outputs = await asyncio.to_thread(self._generate_batch, batch, *key)
                except Exception as error:  # hand the failure to every waiting caller
                    outputs = [error] * len(batch)
            for request, output in zip(batch, outputs, strict=True):
                if request.done.cancelled():
                    continue
                if isinstance(output, Exception):
                    request.done.set_exception(output)
                else:
                    request.done.set_result(output)

    async def _gather_requests(self) -> None:
        """Wait while requests keep arriving, until a window brings none, a batch is full or time is up."""
        waited, count = 0.0, -1
        while waited < MAX_BATCH_WAIT_S:
            pending = sum(map(len, self._pending.values()))
            if pending == count or pending >= self.max_num_seqs:
                return
            count = pending
            await asyncio.sleep(BATCH_WINDOW_S)
            waited += BATCH_WINDOW_S

    @torch.no_grad()
    def _generate_batch(self, batch: list[_Request], temperature: float, top_p: float, top_k: int) -> list[TokenOutput]:
        width = max(len(r.prompt_ids) for r in batch)
        input_ids = torch.full((len(batch), width), self.pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, request in enumerate(batch):  # left padding
            input_ids[row, width - len(request.prompt_ids) :] = torch.tensor(request.prompt_ids)
            attention_mask[row, width - len(request.prompt_ids) :] = 1
        do_sample = temperature > 0
        prompts = [r.prompt_ids for r in batch]
        cache = None
        if self.prefix_cache is not None:
            cache = self.prefix_cache.batch_cache(prompts, width, like=next(self.model.parameters()))
        if cache is None and self._cache_layers is not None:
            cache = GrowingCache(num_layers=self._cache_layers)
        max_new_tokens = max(r.max_tokens for r in batch)
        if cache is not None:
            cache.reserve(width + max_new_tokens)  # its buffers are allocated once (or once more, after a reuse)
        out = self.model.generate(
            input_ids=input_ids.to(self.device),
            attention_mask=attention_mask.to(self.device),
            past_key_values=cache,
            max_new_tokens=max_new_tokens,
            do_sample=do_sample,
            temperature=temperature if do_sample else None,
            top_p=top_p if do_sample else None,
            top_k=top_k if do_sample else None,
            eos_token_id=sorted(self.eos_ids),
            pad_token_id=self.pad_id,
            output_logits=True,
            return_dict_in_generate=True,
        )
        new_tokens = out.sequences[:, width:].cpu()
        logits = torch.stack(out.logits, dim=1).float()  # (batch, steps, vocab), before sampling warpers
        if do_sample:  # the actor scores tokens at the sampling temperature
            logits = logits / temperature
        logprobs = torch.log_softmax(logits, dim=-1).gather(-1, new_tokens.to(logits.device).unsqueeze(-1))
        logprobs = logprobs.squeeze(-1).cpu()
        results = []
        for row, request in enumerate(batch):
            tokens = new_tokens[row, : request.max_tokens].tolist()
            length = response_length(tokens, self.eos_ids)
            results.append(
                TokenOutput(
                    token_ids=tokens[:length],
                    log_probs=logprobs[row, :length].tolist() if request.want_logprobs else None,
                    stop_reason="completed",
                    extra_fields={"global_steps": self.global_steps, "weight_version": self.weight_version},
                )
            )
        if self.prefix_cache is not None:  # a row's cache covers its prompt and all but the last response token
            sequences = [r.prompt_ids + o.token_ids[:-1] for r, o in zip(batch, results, strict=True)]
            self.prefix_cache.store(out.past_key_values, sequences, [width - len(p) for p in prompts])
        return results

    async def update_weights(
        self,
        state_dict: dict[str, torch.Tensor],
        global_steps: int | None = None,
        peft_config: dict[str, Any] | None = None,
        adapter_only: bool = False,
    ) -> int:
        """Load the trainer's current weights; returns how many tensors were loaded."""
        async with self._lock:
            if peft_config is not None and not isinstance(self.model, PeftModel):
                self._wrap_with_lora(peft_config)
            own = {canonical_name(name): tensor for name, tensor in self.model.state_dict().items()}
            unknown = sorted(name for name in state_dict if canonical_name(name) not in own)
            if unknown:
                raise KeyError(f"hf rollout got weights the model does not have: {unknown[:5]}")
            if adapter_only:
                received = {canonical_name(name) for name in state_dict}
                missing = sorted(name for name in own if ".lora_" in name and name not in received)
                if missing:
                    raise KeyError(f"hf rollout got an incomplete LoRA adapter; missing {missing[:5]}")
            with torch.no_grad():
                for name, tensor in state_dict.items():
                    target = own[canonical_name(name)]
                    target.copy_(tensor.to(target.device, target.dtype))
            self.global_steps = global_steps
            self.weight_version += 1
            self._forget_cached()  # keys and values of the old weights
            return len(state_dict)

    def _wrap_with_lora(self, peft_config: dict[str, Any]) -> None:
        """Give the model the actor's LoRA layers (their values come with the weights)."""
        config = PeftConfig.from_peft_type(**{**peft_config, "inference_mode": True})
        self.model = get_peft_model(self.model, config, adapter_name=_PEFT_ADAPTER, autocast_adapter_dtype=False)
        self.model.eval()
        logger.info("hf rollout: serving a LoRA adapter (r=%s, alpha=%s)", config.r, config.lora_alpha)

    async def get_weight_version(self) -> int:
        return self.weight_version

    async def clear_kv_cache(self):
        async with self._lock:  # not while a batch reads or fills the cache
            self._forget_cached()

    def _forget_cached(self) -> None:
        if self.prefix_cache is not None:
            self.prefix_cache.clear()

    # verl drives every rollout server through these; the model stays resident and requests are served whole
    async def wake_up(self):
        pass

    async def sleep(self):
        pass

    async def release_kv_cache(self):
        pass

    async def resume_kv_cache(self):
        pass

    async def abort_all_requests(self, reject_request: bool = False) -> dict[str, Any]:
        return {"aborted_count": 0, "request_ids": []}

    async def resume_generation(self):
        pass

    async def start_profile(self, **kwargs):
        pass

    async def stop_profile(self):
        pass
