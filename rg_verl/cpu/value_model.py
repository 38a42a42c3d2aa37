"""The value model on CPU: verl 0.9.1's ``load_valuehead_model`` always asks for flash-attention (verl issue #5210).

:func:`install` replaces it with one that honours the config; remove this once verl passes it through.
"""

from __future__ import annotations

from typing import Any

# what a CPU run asks for when the model config names no attention implementation
DEFAULT_ATTENTION = "sdpa"


def attention_implementation(model_config: Any) -> str:
    """The attention implementation ``model_config`` asks for; ``sdpa`` when it names none or flash-attention."""
    name = getattr(model_config, "_attn_implementation", None) or DEFAULT_ATTENTION
    return DEFAULT_ATTENTION if "flash" in name else name


def load_valuehead_model(local_path: str, torch_dtype: Any, model_config: Any, trust_remote_code: bool) -> Any:
    """verl's ``load_valuehead_model``, loading a one-label token classifier with the config's attention."""
    from transformers import AutoModelForTokenClassification

    return AutoModelForTokenClassification.from_pretrained(
        pretrained_model_name_or_path=local_path,
        torch_dtype=torch_dtype,
        config=model_config,
        attn_implementation=attention_implementation(model_config),
        trust_remote_code=trust_remote_code,
    )


def install() -> None:
    """Make verl's value-model engine load through :func:`load_valuehead_model` (idempotent)."""
    import verl.utils.model

    verl.utils.model.load_valuehead_model = load_valuehead_model
