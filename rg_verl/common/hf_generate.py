"""What the ``hf`` rollout server and the ``hf`` evaluation backend share: where a response ends, and plain sampling.

``generation_config.json``'s sampling defaults are dropped: vLLM and verl's rollout apply none.

>>> response_length([5, 7, 2, 0, 0], {2}), response_length([5, 7], {2})
(3, 2)
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from types import SimpleNamespace
from typing import Any

__all__ = ["batch_seed", "eos_token_ids", "plain_generation_config", "response_length", "saved_eos_token_ids"]

# the fields of a generation config that name tokens; every other field is a sampling or search default
TOKEN_FIELDS = ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id")


def batch_seed(seed: int, number: int) -> int:
    """The torch seed of batch ``number`` of a seeded generation (torch's global generator, seeded per batch)."""
    return (seed * 1_000_003 + number) % 2**31


def _ids(value: int | Sequence[int] | None) -> list[int]:
    if value is None:
        return []
    return [value] if isinstance(value, int) else list(value)


def eos_token_ids(model: Any, tokenizer: Any = None) -> tuple[int, ...]:
    """The ids that end a response of ``model`` (a ``transformers`` model), sorted, each once.

    >>> from types import SimpleNamespace as NS
    >>> eos_token_ids(NS(generation_config=NS(eos_token_id=[7, 2]), config=NS(eos_token_id=9)), NS(eos_token_id=7))
    (2, 7)
    >>> eos_token_ids(NS(generation_config=NS(eos_token_id=None), config=NS(eos_token_id=9)))
    (9,)
    """
    generation = getattr(model, "generation_config", None)
    ids = _ids(getattr(generation, "eos_token_id", None)) or _ids(model.config.eos_token_id)
    if tokenizer is not None:
        ids += _ids(tokenizer.eos_token_id)
    return tuple(sorted(set(ids)))


def saved_eos_token_ids(model_path: str, tokenizer: Any = None) -> tuple[int, ...]:
    """:func:`eos_token_ids` of a saved model, read from its folder's configs without loading its weights."""
    from transformers import AutoConfig, GenerationConfig

    try:
        generation = GenerationConfig.from_pretrained(model_path)
    except OSError:  # no generation_config.json
        generation = None
    try:
        config = AutoConfig.from_pretrained(model_path)
    except (OSError, ValueError):
        config = SimpleNamespace(eos_token_id=None)
    return eos_token_ids(SimpleNamespace(generation_config=generation, config=config), tokenizer)


def plain_generation_config(model: Any) -> None:
    """Replace ``model.generation_config`` by one that keeps only its token ids (:data:`TOKEN_FIELDS`)."""
    from transformers import GenerationConfig

    current = model.generation_config
    model.generation_config = GenerationConfig(**{k: getattr(current, k, None) for k in TOKEN_FIELDS})


def response_length(tokens: Sequence[int], eos_ids: Collection[int]) -> int:
    """How many of the generated ``tokens`` are response: up to and including the first of ``eos_ids``."""
    for i, token in enumerate(tokens):
        if token in eos_ids:
            return i + 1
    return len(tokens)
