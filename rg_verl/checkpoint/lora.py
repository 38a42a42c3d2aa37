"""PEFT LoRA in the checkpoint: separating LoRA factors from base weights, and the adapter's config."""

from __future__ import annotations

import re
from dataclasses import dataclass

from rg_verl.common.names import PEFT_PREFIX

from .assembly import Source
from .errors import CheckpointError

ADAPTER_DIR = "lora_adapter"  # same sub-folder verl's model_merger writes adapters to


@dataclass
class Lora:
    """One module's LoRA factors, merged as ``base + scale * B @ A``."""

    a: Source
    b: Source
    scale: float
    embedding: bool  # lora_embedding_A/B: delta = (B @ A).T


_LORA_PARAM = re.compile(r"^(?P<module>.+)\.(?P<kind>lora_A|lora_B)\.(?P<adapter>[^.]+)\.weight$")


_LORA_EMB = re.compile(r"^(?P<module>.+)\.(?P<kind>lora_embedding_A|lora_embedding_B)\.(?P<adapter>[^.]+)$")


_BASE_LAYER = re.compile(r"^(?P<module>.+)\.base_layer\.(?P<param>[^.]+)$")


_SAVED_MODULE = re.compile(r"^(?P<module>.+)\.modules_to_save\.(?P<adapter>[^.]+)\.(?P<rest>.+)$")


_ORIGINAL_MODULE = re.compile(r"^.+\.original_module\..+$")


@dataclass
class LoraSplit:
    """A checkpoint's tensors as PEFT's base weights and LoRA factors, and the one adapter's name."""

    base: dict[str, Source]  # HF name -> source
    adapters: dict[str, dict[str, Source]]  # module -> {"A"/"B"/"emb_A"/"emb_B": source}
    adapter_name: str | None


def split_lora(sources: dict[str, Source]) -> LoraSplit:
    """Separate PEFT's keys into base weights (under their Hugging Face names) and LoRA factors."""
    peft = any(k.startswith(PEFT_PREFIX) for k in sources)
    base: dict[str, Source] = {}
    adapters: dict[str, dict[str, Source]] = {}
    names: set[str] = set()
    for key, src in sources.items():
        name = key[len(PEFT_PREFIX) :] if peft and key.startswith(PEFT_PREFIX) else key
        if m := _LORA_PARAM.match(name) or _LORA_EMB.match(name):
            part = {"lora_A": "A", "lora_B": "B", "lora_embedding_A": "emb_A", "lora_embedding_B": "emb_B"}
            adapters.setdefault(m["module"], {})[part[m["kind"]]] = src
            names.add(m["adapter"])
            continue
        if "lora_magnitude_vector" in name:
            raise CheckpointError(f"{key}: DoRA adapters are not supported; only plain LoRA can be merged")
        if re.search(r"\.lora_[A-Za-z_]+\.", name + "."):
            raise CheckpointError(f"{key}: unsupported LoRA tensor (LoRA bias or a LoRA variant)")
        if _ORIGINAL_MODULE.match(name):
            continue  # PEFT's frozen copy of a module whose trained copy is in modules_to_save
        if m := _SAVED_MODULE.match(name):
            names.add(m["adapter"])
            name = f"{m['module']}.{m['rest']}"
        elif m := _BASE_LAYER.match(name):
            name = f"{m['module']}.{m['param']}"
        if name in base:
            raise CheckpointError(f"{key}: two checkpoint tensors map to the Hugging Face name {name}")
        base[name] = src
    if len(names) > 1:
        raise CheckpointError(f"the checkpoint holds several LoRA adapters ({sorted(names)}); only one is supported")
    for module, parts in adapters.items():
        if set(parts) not in ({"A", "B"}, {"emb_A", "emb_B"}):
            raise CheckpointError(f"{module}: LoRA factors incomplete ({sorted(parts)} saved)")
    return LoraSplit(base, adapters, next(iter(names), None))


def adapter_config(rank: int, alpha: float, targets: list[str], task_type: str | None, config: dict) -> dict:
    """PEFT's ``adapter_config.json`` for a LoRA adapter (written by hand when peft is not installed)."""
    try:
        import peft

        cfg = peft.LoraConfig(r=rank, lora_alpha=alpha, target_modules=targets, task_type=task_type or "CAUSAL_LM")
        out = cfg.to_dict()
    except ImportError:
        out = {"peft_type": "LORA", "r": rank, "lora_alpha": alpha, "target_modules": targets, "bias": "none"}
        out["task_type"] = task_type or "CAUSAL_LM"
    for k, v in list(out.items()):
        if hasattr(v, "value"):
            out[k] = v.value
        elif isinstance(v, set | frozenset):
            out[k] = sorted(v)
    out["target_modules"] = targets
    out["base_model_name_or_path"] = out.get("base_model_name_or_path") or config.get("_name_or_path") or None
    return out
