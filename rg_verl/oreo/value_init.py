"""The value model's starting folder: the policy's weights under a one-label head of zeros (OREO starts V at 0)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from rg_verl.common.atomic import write_atomic

__all__ = ["RECORD", "prepare_value_model", "token_classification_architecture"]

RECORD = "value_init.json"


def token_classification_architecture(architectures: list[str] | None) -> list[str] | None:
    """``Qwen2ForCausalLM`` → ``Qwen2ForTokenClassification`` (names already of that kind stay)."""
    if not architectures:
        return architectures
    return [name.replace("ForCausalLM", "ForTokenClassification") for name in architectures]


def _record(source: str, zero_head: bool) -> dict[str, Any]:
    return {"source": os.path.abspath(source), "zero_head": zero_head}


def prepare_value_model(source: str, out_dir: str | os.PathLike, zero_head: bool = True) -> Path:
    """Writes (or reuses) the value model's starting folder at ``out_dir``, from the model at ``source``."""
    import torch
    from transformers import AutoConfig, AutoModelForTokenClassification, AutoTokenizer

    out = Path(out_dir)
    wanted = _record(source, zero_head)
    record = out / RECORD
    if record.is_file() and json.loads(record.read_text()) == wanted:
        return out
    config = AutoConfig.from_pretrained(source)
    config.num_labels = 1
    config.architectures = token_classification_architecture(config.architectures)
    model = AutoModelForTokenClassification.from_pretrained(source, config=config, torch_dtype=torch.float32)
    head = model.score if hasattr(model, "score") else model.classifier
    if zero_head:
        with torch.no_grad():
            for parameter in head.parameters():
                parameter.zero_()
    out.mkdir(parents=True, exist_ok=True)
    record.unlink(missing_ok=True)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(source).save_pretrained(out)
    write_atomic(record, json.dumps(wanted, indent=2) + "\n")
    return out
