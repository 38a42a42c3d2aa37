"""The output plan: Hugging Face names, LoRA merge or adapter, tied weights, dtype, and checks against the
model transformers builds from the config.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from pathlib import Path

import torch

from rg_verl.common.names import PEFT_PREFIX

from .assembly import Checkpoint, Source
from .errors import CheckpointError
from .lora import Lora, LoraSplit, adapter_config, split_lora
from .reading import CheckpointInfo, read_json

logger = logging.getLogger(__name__)


@dataclass
class Output:
    """One tensor of the output: its name, shape and dtype, and the checkpoint tensors it is made from."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    base: Source
    lora: Lora | None = None
    tied: list[Source] = field(default_factory=list)  # sources of tied names dropped in favour of this one

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


def _hf_config(hf_dir: Path | None) -> dict:
    if hf_dir is None or not (hf_dir / "config.json").is_file():
        where = hf_dir or "the checkpoint"
        raise CheckpointError(
            f"no config.json in {where}; verl writes it to <actor>/huggingface. Pass the model's config folder "
            "as hf_dir (CLI: --hf-dir)"
        )
    return read_json(hf_dir / "config.json")


def _reference_model(hf_dir: Path, trust_remote_code: bool) -> tuple[dict[str, tuple[int, ...]], list[list[str]]]:
    """Parameter shapes and tied-name groups of the config's model, built on the meta device.

    Returns empty results when transformers cannot build the model (unknown or remote-code architecture).
    """
    try:
        import transformers
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(hf_dir, trust_remote_code=trust_remote_code)
        arch = (getattr(config, "architectures", None) or [""])[0]
        auto_classes = [transformers.AutoModelForCausalLM]
        for name in ("AutoModelForImageTextToText", "AutoModelForTokenClassification", "AutoModel"):
            if hasattr(transformers, name):
                auto_classes.append(getattr(transformers, name))
        model = None
        with torch.device("meta"):
            for auto in auto_classes:
                try:
                    candidate = auto.from_config(config, trust_remote_code=trust_remote_code)
                except (ValueError, KeyError, ImportError, OSError, TypeError):
                    continue
                if not arch or type(candidate).__name__ == arch:
                    model = candidate
                    break
                model = model or candidate
        if model is None:
            return {}, []
        shapes = {name: tuple(t.shape) for name, t in model.state_dict().items()}
        groups: dict[int, list[str]] = {}
        for name, param in model.named_parameters(remove_duplicate=False):
            groups.setdefault(id(param), []).append(name)
        return shapes, [names for names in groups.values() if len(names) > 1]
    except Exception as err:  # noqa: BLE001 - best effort: the checks it feeds are extra safety
        logger.debug("Could not build the reference model from %s: %s", hf_dir, err)
        return {}, []


def _tied_flag(config: dict) -> bool:
    for cfg in (config, config.get("text_config") or {}):
        if "tie_word_embeddings" in cfg:
            return bool(cfg["tie_word_embeddings"])
    return False


_INPUT_EMBEDDINGS = ("embed_tokens.weight", "wte.weight", "word_embeddings.weight", "embed_in.weight", "shared.weight")


@dataclass
class Plan:
    """Everything a conversion writes, decided before the first byte is written."""

    info: CheckpointInfo
    hf_dir: Path
    config: dict
    outputs: list[Output]  # the model's weights, in checkpoint order
    adapter: list[Output]  # PEFT adapter tensors (keep_lora), under the names PEFT saves them
    adapter_config: dict | None
    lora_mode: str | None  # "merged" | "adapter" | None
    dtype_name: str  # what config.json says after conversion
    tied: list[tuple[str, str]]  # (kept name, dropped name)
    untie: bool = False  # write tie_word_embeddings: false (LoRA merged into one side of a tied pair)


def make_plan(
    ckpt: Checkpoint,
    hf_dir: Path | None,
    dtype: torch.dtype | None,
    merge_lora: bool,
    lora_alpha: float | None,
) -> Plan:
    """What to write: each output tensor's name, shape, dtype and sources, LoRA merged or as an adapter."""
    info = ckpt.info
    config = _hf_config(hf_dir)
    split = split_lora(ckpt.sources)
    if split.adapters and not split.base:
        raise CheckpointError(
            f"{info.actor_dir}: the checkpoint holds only LoRA weights (save_lora_only); the base model's "
            "weights are needed and are not in it"
        )
    outputs = {name: Output(name, src.shape, _out_dtype(src, dtype), src) for name, src in split.base.items()}
    adapter, adapter_cfg = [], None
    if split.adapters:
        adapter, adapter_cfg = _plan_lora(split, outputs, info, config, merge_lora, lora_alpha)
    tied, untie = _tie_embeddings(outputs, config)
    floats = {o.dtype for o in outputs.values() if o.dtype.is_floating_point}
    dtype_name = str(dtype or (floats.pop() if len(floats) == 1 else torch.float32)).removeprefix("torch.")
    lora_mode = ("merged" if merge_lora else "adapter") if split.adapters else None
    return Plan(info, hf_dir, config, list(outputs.values()), adapter, adapter_cfg, lora_mode, dtype_name, tied, untie)


def _out_dtype(src: Source, dtype: torch.dtype | None) -> torch.dtype:
    """``dtype`` for floating-point tensors; integer and bool tensors, and ``dtype=None``, keep their own."""
    return dtype if dtype is not None and src.dtype.is_floating_point else src.dtype


def _plan_lora(
    split: LoraSplit,
    outputs: dict[str, Output],
    info: CheckpointInfo,
    config: dict,
    merge_lora: bool,
    lora_alpha: float | None,
) -> tuple[list[Output], dict | None]:
    """Merge each module's factors into its base output, or list them as PEFT adapter tensors and config."""
    meta = info.lora_meta or {}
    alpha = lora_alpha if lora_alpha is not None else meta.get("lora_alpha")
    if alpha is None:
        raise CheckpointError(
            f"{info.actor_dir}: LoRA weights but no lora_alpha (lora_train_meta.json is missing); pass lora_alpha"
        )
    adapter: list[Output] = []
    ranks: dict[str, int] = {}
    for module, parts in sorted(split.adapters.items()):
        emb = "emb_A" in parts
        a, b = (parts["emb_A"], parts["emb_B"]) if emb else (parts["A"], parts["B"])
        base = outputs.get(f"{module}.weight")
        rank = ranks[module] = _check_factors(module, a, b, base, emb)
        if merge_lora:
            scale = float(alpha) / (math.sqrt(rank) if meta.get("use_rslora") else rank)
            base.lora = Lora(a, b, scale, emb)
        else:
            stem = f"{PEFT_PREFIX}{module}"
            names = ("lora_embedding_A", "lora_embedding_B") if emb else ("lora_A.weight", "lora_B.weight")
            adapter += [Output(f"{stem}.{n}", s.shape, s.dtype, s) for n, s in zip(names, (a, b), strict=True)]
    if merge_lora:
        return adapter, None
    rank = max(ranks.values())
    targets = sorted({m.rsplit(".", 1)[-1] for m in split.adapters})
    cfg = adapter_config(rank, alpha, targets, meta.get("task_type"), config)
    pattern = {m: r for m, r in ranks.items() if r != rank}
    if pattern:
        cfg["rank_pattern"] = pattern
    return adapter, cfg


def _check_factors(module: str, a: Source, b: Source, base: Output | None, emb: bool) -> int:
    """The LoRA rank of ``module``, once its factors are known to fit its base weight."""
    if base is None:
        raise CheckpointError(f"{module}: LoRA factors without the base weight {module}.weight")
    rank = a.shape[0]
    fits = len(base.shape) == 2 and (
        (a.shape, b.shape) == ((rank, base.shape[0]), (base.shape[1], rank))
        if emb
        else (a.shape, b.shape) == ((rank, base.shape[1]), (base.shape[0], rank))
    )
    if not fits:
        raise CheckpointError(
            f"{module}: LoRA factors A {list(a.shape)} / B {list(b.shape)} do not fit the base weight "
            f"{list(base.shape)} (files {a.describe_files()})"
        )
    return rank


def _tie_embeddings(outputs: dict[str, Output], config: dict) -> tuple[list[tuple[str, str]], bool]:
    """Drop ``lm_head.weight`` when the config ties it to the input embedding, as ``save_pretrained`` does.

    Returns the (kept, dropped) name pairs, and whether the config must untie them instead.
    """
    if not _tied_flag(config) or "lm_head.weight" not in outputs:
        return [], False
    head = outputs["lm_head.weight"]
    inputs = [o for n, o in outputs.items() if n.endswith(_INPUT_EMBEDDINGS) and o.shape == head.shape]
    if len(inputs) != 1:
        logger.warning("The config ties the word embeddings, but lm_head.weight has no single partner; kept")
        return [], False
    if head.lora is not None or inputs[0].lora is not None:
        # PEFT adapted one side only: the trained model computes with two different matrices
        logger.warning("LoRA merged into one of the tied embeddings: writing tie_word_embeddings=false")
        return [], True
    inputs[0].tied.append(outputs.pop("lm_head.weight").base)  # save_pretrained stores it once
    return [(inputs[0].name, "lm_head.weight")], False


def check_against_config(plan: Plan, trust_remote_code: bool) -> None:
    """Names and shapes against the model transformers builds from the config (meta device, no memory)."""
    shapes, groups = _reference_model(plan.hf_dir, trust_remote_code)
    if not shapes:
        logger.warning("transformers could not build the config's model; names and shapes not checked against it")
        return
    outputs = {o.name: o for o in plan.outputs}
    dropped = {name for group in groups for name in group[1:]}
    for keep, drop in plan.tied:
        if not any(keep in g and drop in g for g in groups):
            raise CheckpointError(f"{drop} was stored as {keep}, but the config's model does not tie them")
    # non-persistent or recomputed buffers (e.g. rotary inv_freq) are not in state dicts either
    missing = [n for n in shapes if n not in outputs and n not in dropped and not n.endswith("inv_freq")]
    if missing:
        raise CheckpointError(
            f"{plan.info.actor_dir}: the checkpoint lacks {len(missing)} tensor(s) the config's model has: "
            f"{', '.join(missing[:8])}{' ...' if len(missing) > 8 else ''}"
        )
    for out in plan.outputs:
        if out.name in shapes and shapes[out.name] != out.shape:
            raise CheckpointError(
                f"{out.name}: the shards give shape {list(out.shape)} but the config's model expects "
                f"{list(shapes[out.name])} (files {out.base.describe_files()})"
            )
    extra = [n for n in outputs if n not in shapes]
    if extra:
        logger.warning("Tensors the config's model does not have (kept): %s", ", ".join(extra[:8]))
