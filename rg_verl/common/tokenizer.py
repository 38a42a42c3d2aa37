"""Which tokenizer made a sequence of ids: OREO's trajectory files record it; value-guided search checks it."""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["tokenizer_fingerprint"]


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """A sha256 over the vocabulary, special tokens and chat template (not the padding token, which trainers set)."""
    named = {name: getattr(tokenizer, name, None) for name in ("bos_token", "eos_token", "unk_token")}
    blob = {
        "vocab": sorted(tokenizer.get_vocab().items()),
        "special_tokens": sorted({str(token) for token in getattr(tokenizer, "all_special_tokens", ())}),
        "named": {name: None if token is None else str(token) for name, token in named.items()},
        "chat_template": getattr(tokenizer, "chat_template", None),
    }
    text = json.dumps(blob, sort_keys=True, ensure_ascii=False, default=str)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()
