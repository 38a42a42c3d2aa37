"""A model a config names (a folder, a cached hub id, or the hub) and the context length its config allows."""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from typing import Any

from rg_verl.common.schema import ConfigError

__all__ = ["ContextLength", "check_model_path", "config_context_length", "context_length", "model_folder"]

logger = logging.getLogger(__name__)

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
HUB_TIMEOUT_S = 10.0
# rope types whose factor stretches max_position_embeddings (transformers' modeling_rope_utils.py); llama3 and
# longrope configs already give the stretched length
STRETCHING_ROPE_TYPES = ("linear", "dynamic", "yarn")
_TRUE = ("1", "ON", "YES", "TRUE")  # huggingface_hub's spellings of a set flag


@dataclass(frozen=True)
class ContextLength:
    """Tokens one sequence may hold (prompt and response), their source for errors, and the unstretched positions."""

    tokens: int
    source: str
    positions: int


def hub_cache() -> str:
    """The Hugging Face cache this process reads: huggingface_hub's ``HF_HUB_CACHE``."""
    from huggingface_hub import constants  # lazy, as every huggingface_hub import here: only a hub id needs it

    return constants.HF_HUB_CACHE


def is_offline() -> bool:
    """Whether HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) is set, now or when huggingface_hub was imported."""
    from huggingface_hub import constants

    flags = (os.environ.get(name, "").upper() for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))
    return bool(constants.HF_HUB_OFFLINE) or any(flag in _TRUE for flag in flags)


def is_hub_id(path: str) -> bool:
    """Whether ``path`` reads as a hub id: ``org/name``, neither absolute nor anything on this disk."""
    return bool(HUB_ID.match(path)) and not os.path.isabs(path) and not os.path.exists(path)


def cached_folder(repo_id: str) -> str | None:
    """The folder of hub id ``repo_id``'s ``main`` revision in the local cache; None if the cache holds none."""
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(repo_id, "config.json", cache_dir=hub_cache())
    except ValueError:  # not a valid repo id for huggingface_hub
        return None
    return os.path.dirname(found) if isinstance(found, str) else None


def model_folder(path: str) -> str | None:
    """The folder here that holds the model ``path`` names (itself, or a hub id's cached snapshot); else None."""
    if os.path.isdir(path):
        return path
    return cached_folder(path) if is_hub_id(path) else None


def check_model_path(where: str, path: Any) -> None:
    """A model path must resolve (folder, cache, or hub); a gated model the hub knows passes with a warning."""
    if not isinstance(path, str) or not path:
        raise ConfigError(f"{where}: {path!r} is not a model path; set a local directory or a hub id like org/name")
    if os.path.isdir(path):
        return
    if not is_hub_id(path):
        raise ConfigError(
            f"{where}: {path!r} is neither a local model directory nor a hub id (org/name); "
            "fix the path or download the model first"
        )
    if cached_folder(path) is None:
        _check_on_hub(where, path)


def _network_errors() -> tuple[type[BaseException], ...]:
    """What a request to the hub raises when the hub cannot be reached (httpx's errors from huggingface_hub 1.0)."""
    try:
        import httpx
    except ImportError:
        return (OSError,)
    return (OSError, httpx.HTTPError)


def _check_on_hub(where: str, repo_id: str) -> None:
    """``repo_id``, absent from the cache, exists on the hub; an error where the hub says no or cannot be asked."""
    cache = hub_cache()
    fix = (
        f"download it with `hf download {repo_id}` on a machine that is online and set HF_HOME (or HF_HUB_CACHE) to "
        "the cache that holds it, or give a local folder"
    )
    if is_offline():
        raise ConfigError(
            f"{where}: {repo_id!r} is no local folder, this machine is offline (HF_HUB_OFFLINE), and the Hugging Face "
            f"cache at {cache} does not hold it; fix the id, or {fix}"
        )
    from huggingface_hub import HfApi
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError

    try:
        HfApi().model_info(repo_id, timeout=HUB_TIMEOUT_S)
    except GatedRepoError:
        _warn_token(where, repo_id, "is gated")
    except RepositoryNotFoundError:  # a 404, or a 401 for a repo this token (or none) cannot see
        raise ConfigError(
            f"{where}: {repo_id!r} is no local folder, is not in the Hugging Face cache at {cache}, and the hub has "
            "no model of that id; fix the id (a private model needs a token: hf auth login, or HF_TOKEN), or give a "
            "local folder"
        ) from None
    except HfHubHTTPError as error:
        status = getattr(getattr(error, "response", None), "status_code", None)
        if status not in (401, 403):
            raise ConfigError(_unreachable(where, repo_id, cache, f"HTTP {status}", fix)) from None
        _warn_token(where, repo_id, f"answered {status}")
    except _network_errors() as error:
        raise ConfigError(_unreachable(where, repo_id, cache, type(error).__name__, fix)) from None


def _unreachable(where: str, repo_id: str, cache: str, problem: str, fix: str) -> str:
    return (
        f"{where}: {repo_id!r} is no local folder and is not in the Hugging Face cache at {cache}, and the hub could "
        f"not be reached to find it ({problem}); {fix}"
    )


def _warn_token(where: str, repo_id: str, what: str) -> None:
    logger.warning(
        "%s: %s %s on the Hugging Face hub: the run needs a token that may read it (accept its licence on "
        "https://huggingface.co/%s, then hf auth login, or set HF_TOKEN)",
        where, repo_id, what, repo_id,
    )  # fmt: skip


def context_length(path: str) -> ContextLength | None:
    """The context length of the model ``path`` names, from its config; None where no config can be read here."""
    folder = model_folder(path)
    if folder is None or not os.path.isfile(os.path.join(folder, "config.json")):
        return None
    from transformers import AutoConfig  # lazy: transformers' auto classes take seconds to import

    try:
        config = AutoConfig.from_pretrained(folder)
    except (OSError, ValueError, KeyError) as error:  # e.g. a model type this transformers does not know
        logger.debug("%s: cannot read its config (%s); its context length is not checked", path, error)
        return None
    return config_context_length(config, os.path.join(folder, "config.json"))


def config_context_length(config: Any, where: str) -> ContextLength | None:
    """The positions a transformers config allows: ``max_position_embeddings`` stretched by a rope factor, else None.

    >>> from types import SimpleNamespace as Config
    >>> config_context_length(Config(max_position_embeddings=32768), "config.json")
    ContextLength(tokens=32768, source='max_position_embeddings 32768 in config.json', positions=32768)
    >>> yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
    >>> config_context_length(Config(max_position_embeddings=32768, rope_parameters=yarn), "config.json").tokens
    131072
    """
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    positions = getattr(text, "max_position_embeddings", None)
    if isinstance(positions, bool) or not isinstance(positions, int) or positions < 1:
        return None
    rope = getattr(text, "rope_parameters", None) or getattr(text, "rope_scaling", None) or {}
    kind = rope.get("rope_type", rope.get("type")) if isinstance(rope, dict) else None
    factor = rope.get("factor") if kind in STRETCHING_ROPE_TYPES else None
    if isinstance(factor, bool) or not isinstance(factor, int | float) or factor <= 1:
        return ContextLength(positions, f"max_position_embeddings {positions} in {where}", positions)
    base, key = positions, "max_position_embeddings"
    original = rope.get("original_max_position_embeddings")
    if kind == "yarn" and isinstance(original, int) and not isinstance(original, bool) and 0 < original != positions:
        base, key = original, "original_max_position_embeddings"
    return ContextLength(int(base * factor), f"{key} {base} × rope {kind} factor {factor:g} in {where}", positions)
