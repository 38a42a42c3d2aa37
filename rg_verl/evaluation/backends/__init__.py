"""Generation backends by name (:data:`BACKENDS`; the value modes' :data:`SEARCH_BACKENDS`), importing packages late."""

from __future__ import annotations

from rg_verl.evaluation.backends.base import Backend, Completion, Sampling
from rg_verl.evaluation.backends.hf import HFBackend
from rg_verl.evaluation.backends.openai import OpenAIBackend
from rg_verl.evaluation.backends.search import HFValueSearchBackend, ValueSearchBackend, VLLMValueSearchBackend
from rg_verl.evaluation.backends.vllm import VLLMBackend

__all__ = ["BACKENDS", "SEARCH_BACKENDS", "Backend", "Completion", "Sampling", "create_backend", "backend_class"]

BACKENDS: dict[str, type[Backend]] = {"vllm": VLLMBackend, "hf": HFBackend, "openai": OpenAIBackend}
SEARCH_BACKENDS: dict[str, type[ValueSearchBackend]] = {"hf": HFValueSearchBackend, "vllm": VLLMValueSearchBackend}


def backend_class(name: str) -> type[Backend]:
    """The backend class registered as ``name``; a ValueError lists the valid names."""
    if name not in BACKENDS:
        raise ValueError(f"unknown evaluation backend {name!r}; valid backends: {', '.join(BACKENDS)}")
    return BACKENDS[name]


def create_backend(config) -> Backend:
    """Builds the backend ``config.backend`` names (with a value mode, beside its value model) and loads the model."""
    decoding = getattr(config, "decoding", None)
    if decoding is not None and decoding.mode != "sample":
        if config.backend not in SEARCH_BACKENDS:
            raise ValueError(f"backend {config.backend!r} has no value search; use one of {', '.join(SEARCH_BACKENDS)}")
        return SEARCH_BACKENDS[config.backend](config)
    return backend_class(config.backend)(config)
