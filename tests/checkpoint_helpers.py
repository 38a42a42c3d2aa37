"""What the checkpoint tests share: the prompt whose logits they compare, and reading a converted folder back."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file

__all__ = ["PROMPT", "load_hf", "logits_of", "output_tensors"]

# token ids inside the tiny model's vocabulary; the trained and the converted model must agree on its logits
PROMPT = torch.tensor([[3, 17, 254, 99, 512, 7, 1000, 42, 64, 1]])


def load_hf(path: Path, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    """The converted folder as transformers loads it, in eval mode."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval()


def logits_of(model: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=PROMPT).logits.float()


def output_tensors(out: Path) -> dict[str, torch.Tensor]:
    """Every tensor of every safetensors file in ``out`` (not its sub-folders)."""
    tensors = {}
    for f in sorted(out.glob("*.safetensors")):
        tensors.update(load_file(f))
    return tensors
