"""Generation backends (``vllm``, ``hf``, ``openai``), one interface, chosen by name in :data:`BACKENDS`.

``backend.generate(prompts, n, sampling)[i][j]`` is the j-th of n completions of ``prompts[i]``. The value modes of
``decoding`` build a :data:`SEARCH_BACKENDS` entry instead. A new backend subclasses :class:`Backend` and is added
to :data:`BACKENDS`; heavy packages are imported inside ``__init__`` so this dict stays cheap to import.
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
    """The backend class registered as ``name``; a ValueError lists the valid names."""
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
