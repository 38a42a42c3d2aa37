"""Every prompt of an evaluation, with ``max_tokens`` of response, fits the model's context: checked before it loads.

A model without a local tokenizer, or a server that reports no context, is not checked.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

from rg_verl.common.models import ContextLength, context_length, model_folder
from rg_verl.common.schema import ConfigError
from rg_verl.evaluation.backends.hf import prompt_token_ids
from rg_verl.evaluation.backends.openai import served_max_model_len
from rg_verl.evaluation.config import EvalConfig
from rg_verl.evaluation.items import EvalDataset, prompt_messages

__all__ = ["LongestPrompt", "check_context", "longest_prompt", "model_context"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LongestPrompt:
    """The longest prompt of a run in tokens, and which one it is: the entry's field and the item's key."""

    tokens: int
    field: str
    key: str


def model_context(config: EvalConfig) -> ContextLength | None:
    """The context of the model ``config`` evaluates, by its backend (see the module docstring); None where unknown."""
    if config.backend == "openai":
        length = served_max_model_len(config)
        name = config.served_model_name or config.model_path
        where = f"max_model_len that {config.base_url.rstrip('/')}/models reports for {name}"
        return None if length is None else ContextLength(length, where, length)
    found = context_length(config.model_path)
    engine = config.engine_kwargs.get("max_model_len") if config.backend == "vllm" else None
    if isinstance(engine, int) and not isinstance(engine, bool) and engine > 0:
        if found is None or engine < found.tokens:
            return ContextLength(engine, f"engine_kwargs.max_model_len {engine}", engine)
    return found


def _tokenizer(config: EvalConfig) -> Any | None:
    """The model's tokenizer, from its folder on this machine; None (logged) where there is none to read."""
    if config.backend == "openai" and not os.path.isdir(os.path.expanduser(config.model_path)):
        logger.debug("openai: %r is no local folder, so its tokenizer is not here; prompt lengths are not checked",
                     config.model_path)  # fmt: skip
        return None
    folder = model_folder(os.path.expanduser(config.model_path))
    if folder is None:
        logger.debug("%s: no tokenizer on this machine; prompt lengths are not checked", config.model_path)
        return None
    from transformers import AutoTokenizer  # lazy: transformers' auto classes take seconds to import

    try:
        return AutoTokenizer.from_pretrained(folder)
    except (OSError, ValueError, KeyError, TypeError) as error:
        logger.debug("%s: cannot load its tokenizer (%s); prompt lengths are not checked", config.model_path, error)
        return None


def longest_prompt(config: EvalConfig, datasets: list[EvalDataset], tokenizer: Any) -> LongestPrompt | None:
    """The (first) longest prompt of ``datasets``, tokenized as the backend sends it; None without items."""
    fields = {
        id(entry): f"categories[{i}].datasets[{j}]"
        for i, category in enumerate(config.categories)
        for j, entry in enumerate(category.datasets)
    }
    longest = None
    for dataset in datasets:
        for index in range(len(dataset)):
            messages = prompt_messages(dataset[index], config)
            tokens = len(prompt_token_ids(tokenizer, messages, config.chat_template_kwargs))
            if longest is None or tokens > longest.tokens:
                field = fields.get(id(dataset.entry), dataset.key)
                longest = LongestPrompt(tokens, field, dataset.item_key(index))
    return longest


def check_context(config: EvalConfig, datasets: list[EvalDataset]) -> None:
    """``max_tokens`` plus the longest prompt of ``datasets`` fits the model's context; a ConfigError names both."""
    tokenizer = _tokenizer(config)
    if tokenizer is None:
        return
    context = model_context(config)
    if context is None:
        logger.debug("%s: its context length is unknown here; prompt lengths are not checked", config.model_path)
        return
    longest = longest_prompt(config, datasets, tokenizer)
    if longest is None or longest.tokens + config.max_tokens <= context.tokens:
        return
    room = context.tokens - longest.tokens
    fix = f"lower max_tokens to at most {room}" if room > 0 else "leave that dataset out (its prompt alone fills it)"
    raise ConfigError(
        f"max_tokens: {config.max_tokens} + the longest prompt, {longest.tokens} tokens ({longest.field}, item "
        f"{longest.key}), = {config.max_tokens + longest.tokens} tokens, more than the model's context of "
        f"{context.tokens} ({context.source}); {fix}, or evaluate a model with a longer context"
    )
