"""A Hugging Face cache on disk, laid out as huggingface_hub lays one out, holding only config files.

``models--<org>--<name>/refs/main`` names a snapshot, ``snapshots/<sha>/config.json`` is the model's config: what
``huggingface_hub.try_to_load_from_cache`` and ``from_pretrained(..., local_files_only=True)`` read. The tests'
session cache (tests/conftest.py, ``hub_cache``) holds :data:`HUB_MODELS`, so the hub ids of the shipped configs
resolve as on a machine that has downloaded them, and no test reaches the hub.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

# hub id -> the fields of its config.json on the hub that rg-verl's checks read (the context length)
HUB_MODELS = {
    "Qwen/Qwen2.5-0.5B-Instruct": {"model_type": "qwen2", "max_position_embeddings": 32768},
    "Qwen/Qwen2.5-3B-Instruct": {"model_type": "qwen2", "max_position_embeddings": 32768},
    "Qwen/Qwen2.5-7B-Instruct": {"model_type": "qwen2", "max_position_embeddings": 32768},
    "Qwen/Qwen2.5-7B": {"model_type": "qwen2", "max_position_embeddings": 131072},
    "Qwen/Qwen2.5-Math-1.5B-Instruct": {"model_type": "qwen2", "max_position_embeddings": 4096},
    "Qwen/Qwen3-4B-Thinking-2507": {"model_type": "qwen3", "max_position_embeddings": 262144},
    "meta-llama/Llama-3.2-3B-Instruct": {
        "model_type": "llama",
        "max_position_embeddings": 131072,
        "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                         "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    },  # fmt: skip
}


def write_cached_model(cache: Path, repo_id: str, config: dict, files: dict[str, str] | None = None) -> Path:
    """``repo_id``'s ``main`` snapshot in the cache folder ``cache``, holding ``config.json`` and ``files`` (name ->
    text); returns the snapshot's folder."""
    sha = hashlib.sha1(repo_id.encode()).hexdigest()
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / sha
    snapshot.mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(sha)
    (snapshot / "config.json").write_text(json.dumps(config))
    for name, text in (files or {}).items():
        (snapshot / name).write_text(text)
    return snapshot


def write_hub_cache(cache: Path) -> Path:
    """A cache folder holding every model of :data:`HUB_MODELS`; returns ``cache``."""
    for repo_id, config in HUB_MODELS.items():
        write_cached_model(cache, repo_id, config)
    return cache
