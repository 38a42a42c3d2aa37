"""Local generation with vLLM: every prompt and repeat in one call."""

from __future__ import annotations

import logging

from rg_verl.evaluation.backends.base import Backend, Completion, Messages, Sampling
from rg_verl.schema import ConfigError

logger = logging.getLogger(__name__)


class VLLMBackend(Backend):
    """``vllm.LLM.chat`` with all prompts at once and ``n`` samples each (``SamplingParams.n``).

    One call lets vLLM schedule every sequence with continuous batching and share each prompt's
    prefix across its ``n`` samples; the chat template is the model's own. So results are saved
    once, after that call (the default ``save_every``), unless the config asks for more often.
    """

    def __init__(self, config) -> None:
        try:
            from vllm import LLM
        except ImportError as error:
            raise ConfigError(
                f"backend: 'vllm' cannot be imported ({error}); install vllm or set backend: hf"
            ) from None
        self.llm = LLM(model=config.model_path, dtype=config.dtype, **config.engine_kwargs)
        logger.info("vllm backend: %s", config.model_path)

    def generate(self, prompts: list[Messages], n: int, sampling: Sampling) -> list[list[Completion]]:
        from vllm import SamplingParams

        params = SamplingParams(
            n=n, temperature=sampling.temperature, top_p=sampling.top_p, max_tokens=sampling.max_tokens
        )
        outputs = self.llm.chat(prompts, params, use_tqdm=True)
        return [[Completion(text=o.text, num_tokens=len(o.token_ids)) for o in out.outputs] for out in outputs]

    def close(self) -> None:
        self.llm = None
