"""What a chat template writes at the start of the assistant's turn (``<think>`` for Qwen3): ``docs/reward.md``."""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Mapping
from typing import Any

from rg_verl.common.names import THINK_OPEN

__all__ = ["AUTO", "load_tokenizer", "response_prefix", "resolve_response_prefix"]

logger = logging.getLogger(__name__)

# ``response_prefix: auto``: read it off the tokenizer's chat template
AUTO = "auto"

_PROBE = [{"role": "user", "content": "?"}]


def response_prefix(tokenizer: Any, template_kwargs: Mapping[str, Any] | None = None) -> str:
    """The text from ``<think>`` on that the generation prompt of ``tokenizer``'s chat template ends with, or ""."""
    if not getattr(tokenizer, "chat_template", None):
        return ""
    kwargs = dict(template_kwargs or {})
    without = tokenizer.apply_chat_template(_PROBE, add_generation_prompt=False, tokenize=False, **kwargs)
    with_prompt = tokenizer.apply_chat_template(_PROBE, add_generation_prompt=True, tokenize=False, **kwargs)
    generation = with_prompt[len(without) :] if with_prompt.startswith(without) else with_prompt
    at = generation.rfind(THINK_OPEN)
    return generation[at:] if at >= 0 else ""


@functools.lru_cache(maxsize=4)
def load_tokenizer(path: str) -> Any:
    """The tokenizer at ``path``, loaded once per process (the reward's token counts use it too)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


@functools.lru_cache(maxsize=8)
def _detected(tokenizer_path: str, template_kwargs: str) -> str:
    try:
        tokenizer = load_tokenizer(tokenizer_path)
    except Exception as error:  # noqa: BLE001 - detection is best effort; the override is named
        logger.warning(
            "response_prefix: auto could not load the tokenizer at %r (%s); judging responses without a prefix. "
            "Set response_prefix to the text the chat template opens the assistant turn with (e.g. '<think>\\n') "
            "or to '' to silence this",
            tokenizer_path, error,
        )  # fmt: skip
        return ""
    prefix = response_prefix(tokenizer, json.loads(template_kwargs))
    if prefix:
        logger.info("response_prefix: the chat template of %s opens the assistant turn with %r", tokenizer_path, prefix)
    return prefix


def resolve_response_prefix(
    value: str, tokenizer_path: str | None, template_kwargs: Mapping[str, Any] | None = None
) -> str:
    """``value``, or for :data:`AUTO` the prefix of the tokenizer at ``tokenizer_path`` ("" without one)."""
    if value != AUTO:
        return value
    if not tokenizer_path:
        return ""
    return _detected(str(tokenizer_path), json.dumps(dict(template_kwargs or {}), sort_keys=True, default=str))
