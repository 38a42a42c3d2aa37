"""Attention for the ``hf`` rollout on a CPU: grouped key/value heads go to PyTorch's SDPA as they are.

Qwen2 and most current models use grouped-query attention: fewer key/value heads than query heads. transformers'
``sdpa`` attention lets ``torch.nn.functional.scaled_dot_product_attention`` share each key/value head across its
group (``enable_gqa``) only when there is no attention mask, because on CUDA a mask sends grouped heads to the slow
math kernel. Otherwise it first copies every key/value head once per query head in its group. A padded batch always
has a mask, so on a CPU each decoding step copies the whole key/value cache of every layer, and a step costs more
the longer the context is (a multi-turn episode's later tries decode after long contexts).

PyTorch's CPU flash kernel takes grouped heads and a mask together, so :func:`grouped_sdpa` passes them as they are.
It is registered under :data:`NAME` with transformers' public ``AttentionInterface`` (and the mask that ``sdpa``
uses with ``AttentionMaskInterface``); the server asks for it only on a CPU. The results are those of ``sdpa`` up to
float rounding.
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.masking_utils import sdpa_mask

NAME = "rg_verl_grouped_sdpa"


def grouped_sdpa(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: (batch, heads, tokens, head_dim) in, (batch, tokens, heads,
    head_dim) out, with no attention weights."""
    causal = getattr(module, "is_causal", True) if is_causal is None else is_causal
    output = torch.nn.functional.scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask=attention_mask,
        dropout_p=dropout,
        scale=scaling,
        is_causal=causal and attention_mask is None and query.shape[2] > 1,  # a mask carries causality itself
        enable_gqa=key.shape[1] != query.shape[1],
    )
    return output.transpose(1, 2).contiguous(), None


def attention_for(device: torch.device) -> str:
    """The ``attn_implementation`` the server loads its model with on ``device``."""
    if device.type != "cpu":
        return "sdpa"
    AttentionInterface.register(NAME, grouped_sdpa)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    return NAME
