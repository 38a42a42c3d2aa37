"""Attention for the ``hf`` rollout on a CPU: grouped key/value heads go to PyTorch's SDPA as they are.

transformers' ``sdpa`` copies each key/value head per query head whenever there is a mask (always, when padded).
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
    """transformers' attention signature: (batch, heads, tokens, dim) in, (batch, tokens, heads, dim) out."""
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
