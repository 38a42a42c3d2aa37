"""Generation backends: one interface, chosen by name in one plain dict.

A backend turns chat prompts into completions::

    backend = create_backend(config)          # config.backend names it
    outputs = backend.generate(prompts, n, sampling)
    # outputs[i][j]: the j-th of n completions of prompts[i], a Completion(text, num_tokens)

- ``vllm``: every prompt and repeat in one ``LLM.chat`` call (vLLM batches and schedules them).
- ``hf``: transformers ``generate`` over batches of prompts, left-padded, chat template applied.
- ``openai``: any OpenAI-compatible server (``vllm serve``, a hosted API): concurrent requests,
  a bound on how many are in flight, retries with exponential backoff.

With ``decoding.mode`` ``value_beam`` or ``value_rerank`` (OREO's value-guided search), ``create_backend``
builds the :data:`SEARCH_BACKENDS` entry of ``config.backend`` (:mod:`rg_verl.evaluation.backends.search`):
the hf or vllm policy with a value model beside it.

To add a backend: subclass :class:`Backend` in a module here, with ``__init__(self, config: EvalConfig)``
and ``generate(...)`` (and ``close()`` or ``default_save_every(config)`` where the defaults do not fit);
import it below and add it to :data:`BACKENDS`, the one list of backend names (the config and the
command line take theirs from it). Import heavy packages inside ``__init__``, not at module level, so
that this dict stays cheap to import.
"""

from __future__ import annotations

from rg_verl.evaluation.backends.base import Backend, Completion, Sampling
from rg_verl.evaluation.backends.hf import HFBackend
from rg_verl.evaluation.backends.openai import OpenAIBackend
from rg_verl.evaluation.backends.search import HFValueSearchBackend, ValueSearchBackend, VLLMValueSearchBackend
from rg_verl.evaluation.backends.vllm import VLLMBackend

__all__ = ["BACKENDS", "SEARCH_BACKENDS", "Backend", "Completion", "Sampling", "create_backend", "backend_class"]

BACKENDS: dict[str, type[Backend]] = {
    "vllm": VLLMBackend,
    "hf": HFBackend,
    "openai": OpenAIBackend,
}

# the backends of the value modes of ``decoding``, by the policy's backend name
SEARCH_BACKENDS: dict[str, type[ValueSearchBackend]] = {
    "hf": HFValueSearchBackend,
    "vllm": VLLMValueSearchBackend,
}


def backend_class(name: str) -> type[Backend]:
    """The backend class registered as ``name``.

    Raises:
        ValueError: If no backend has that name; the message lists the valid names.
    """
    if name not in BACKENDS:
        raise ValueError(f"unknown evaluation backend {name!r}; valid backends: {', '.join(BACKENDS)}")
    return BACKENDS[name]


def create_backend(config) -> Backend:
    """Builds (and loads the model of) the backend that ``config.backend`` names; with a value mode in
    ``config.decoding`` (an evaluation config), that policy with its value model beside it."""
    decoding = getattr(config, "decoding", None)
    if decoding is not None and decoding.mode != "sample":
        if config.backend not in SEARCH_BACKENDS:
            raise ValueError(f"backend {config.backend!r} has no value search; use one of {', '.join(SEARCH_BACKENDS)}")
        return SEARCH_BACKENDS[config.backend](config)
    return backend_class(config.backend)(config)
