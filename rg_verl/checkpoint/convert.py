"""The conversion: :func:`convert_checkpoint` (plan, streamed safetensors files, publish), :func:`verify_conversion`."""

from __future__ import annotations

import json
import logging
import math
import os
import re
import shutil
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from huggingface_hub import split_torch_state_dict_into_shards
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from tqdm.auto import tqdm

from rg_verl.common.atomic import PublishError, staging_dir
from rg_verl.common.names import PEFT_PREFIX

from .shards import (
    CheckpointError, CheckpointInfo, OutputExistsError, Source, assemble, inspect_checkpoint, load_state, local,
    read_json, sources,
)  # fmt: skip

logger = logging.getLogger(__name__)
DTYPES: dict[str, torch.dtype | None] = {"auto": None, "bf16": torch.bfloat16, "fp16": torch.float16}
DTYPES["fp32"] = torch.float32
DEFAULT_MAX_SHARD_SIZE = "5GB"
ADAPTER_DIR = "lora_adapter"  # where verl's model_merger writes adapters too
_WEIGHT_FILE = re.compile(r"\.(safetensors|bin|pt|pth|ckpt)(\.index\.json)?$")
_LORA = re.compile(r"^(?P<module>.+)\.lora_(?P<kind>A|B|embedding_A|embedding_B)\.(?P<adapter>[^.]+)(\.weight)?$")
_FLOATS = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}
_EMBEDDINGS = ("embed_tokens.weight", "wte.weight", "word_embeddings.weight", "embed_in.weight", "shared.weight")


@dataclass
class Output:
    """One output tensor: its name, dtype and the checkpoint tensors it is made from."""

    name: str
    src: Source
    dtype: torch.dtype
    lora: tuple[Source, Source, float, bool] | None = None  # A, B, scale, embedding (delta = (B @ A).T)
    tied: list[Source] = field(default_factory=list)  # tied names stored once, as this one

    shape = property(lambda self: self.src.shape)


@dataclass
class Plan:
    """Everything a conversion writes, decided before the first byte is written."""

    info: CheckpointInfo
    hf_dir: Path
    config: dict
    outputs: dict[str, Output]
    adapter: dict[str, Output]  # PEFT adapter tensors (keep_lora)
    adapter_config: dict | None
    lora_mode: str | None  # "merged" | "adapter" | None
    dtype_name: str
    tied: list[tuple[str, str]]  # (kept, dropped)
    untie: bool  # LoRA merged into one side of a tied pair: the config must untie them


def parse_size(size: int | str) -> int:
    """Bytes in ``5GB``, ``500MB``, ``2GiB``, ``100KB`` or a plain integer (decimal units, as transformers)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(I?)B?\s*", str(size).upper())
    value = float(m[1]) * (1024 if m[3] else 1000) ** " KMGT".index(m[2] or " ") if m else 0
    if value < 1:
        raise CheckpointError(f"cannot read the size {size!r}; use e.g. 5GB, 500MB or a positive number of bytes")
    return int(value)


def make_plan(info: CheckpointInfo, srcs: dict[str, Source], hf_dir: Path | None, dtype: torch.dtype | None,
              merge_lora: bool, lora_alpha: float | None) -> Plan:  # fmt: skip
    """Each output tensor's name, dtype and sources: PEFT names undone, LoRA merged or kept, tied weights once."""
    if hf_dir is None or not (hf_dir / "config.json").is_file():
        raise CheckpointError(
            f"no config.json in {hf_dir or 'the checkpoint'}; verl writes it to <actor>/huggingface. Pass the "
            "model's config folder as hf_dir (CLI: --hf-dir)"
        )
    config, meta = read_json(hf_dir / "config.json"), info.lora_meta or {}
    peft = any(k.startswith(PEFT_PREFIX) for k in srcs)
    outputs: dict[str, Output] = {}
    factors: dict[str, dict[str, Source]] = {}
    adapters: set[str] = set()
    for key, src in srcs.items():
        name = key.removeprefix(PEFT_PREFIX) if peft else key
        if m := _LORA.match(name):
            factors.setdefault(m["module"], {})[m["kind"]] = src
            adapters.add(m["adapter"])
        elif "lora_magnitude_vector" in name or re.search(r"\.lora_[A-Za-z_]+\.", name + "."):
            raise CheckpointError(f"{key}: unsupported LoRA tensor (DoRA, LoRA bias or another variant)")
        elif not re.match(r"^.+\.original_module\..+$", name):  # PEFT's frozen copy of a modules_to_save module
            if m := re.match(r"^(?P<module>.+)\.modules_to_save\.(?P<adapter>[^.]+)\.(?P<rest>.+)$", name):
                adapters.add(m["adapter"])
            name = re.sub(r"\.(base_layer|modules_to_save\.[^.]+)\.", ".", name)
            if name in outputs:
                raise CheckpointError(f"{key}: two checkpoint tensors map to the Hugging Face name {name}")
            keep = dtype is None or not src.dtype.is_floating_point
            outputs[name] = Output(name, src, src.dtype if keep else dtype)
    if len(adapters) > 1:
        raise CheckpointError(f"the checkpoint holds several LoRA adapters ({sorted(adapters)}); only one is supported")
    if factors and not outputs:
        raise CheckpointError(
            f"{info.actor_dir}: the checkpoint holds only LoRA weights (save_lora_only); the base model's "
            "weights are needed and are not in it"
        )
    alpha = lora_alpha if lora_alpha is not None else meta.get("lora_alpha")
    if factors and alpha is None:
        raise CheckpointError(f"{info.actor_dir}: LoRA weights but no lora_train_meta.json; pass lora_alpha")
    adapter, ranks = {}, {}
    for module, parts in sorted(factors.items()):
        emb = "embedding_A" in parts
        if set(parts) not in ({"A", "B"}, {"embedding_A", "embedding_B"}):
            raise CheckpointError(f"{module}: LoRA factors incomplete ({sorted(parts)} saved)")
        a, b = (parts["embedding_A"], parts["embedding_B"]) if emb else (parts["A"], parts["B"])
        base, r = outputs.get(f"{module}.weight"), a.shape[0]
        rows, cols = base.shape if base is not None and len(base.shape) == 2 else (-1, -1)
        if (a.shape, b.shape) != (((r, rows), (cols, r)) if emb else ((r, cols), (rows, r))):
            raise CheckpointError(
                f"{module}: LoRA factors A {list(a.shape)} / B {list(b.shape)} do not fit the base weight "
                f"{list(base.shape) if base else 'that is missing'} (files {a.describe_files()})"
            )
        ranks[module] = r
        if merge_lora:
            base.lora = (a, b, float(alpha) / (math.sqrt(r) if meta.get("use_rslora") else r), emb)
        else:
            names = ("lora_embedding_A", "lora_embedding_B") if emb else ("lora_A.weight", "lora_B.weight")
            for n, s in zip(names, (a, b), strict=True):
                adapter[f"{PEFT_PREFIX}{module}.{n}"] = Output(f"{PEFT_PREFIX}{module}.{n}", s, s.dtype)
    cfg = None if merge_lora or not factors else _adapter_config(ranks, alpha, meta.get("task_type"), config)
    tied, untie = _tie(outputs, config)
    floats = {o.dtype for o in outputs.values() if o.dtype.is_floating_point}
    dtype_name = str(dtype or (floats.pop() if len(floats) == 1 else torch.float32)).removeprefix("torch.")
    mode = ("merged" if merge_lora else "adapter") if factors else None
    return Plan(info, hf_dir, config, outputs, adapter, cfg, mode, dtype_name, tied, untie)


def _adapter_config(ranks: dict[str, int], alpha: float, task_type: str | None, config: dict) -> dict:
    import peft

    rank, targets = max(ranks.values()), sorted({m.rsplit(".", 1)[-1] for m in ranks})
    cfg = peft.LoraConfig(r=rank, lora_alpha=alpha, target_modules=targets, task_type=task_type or "CAUSAL_LM")
    out = {k: sorted(v) if isinstance(v, set) else getattr(v, "value", v) for k, v in cfg.to_dict().items()}
    out["base_model_name_or_path"] = out.get("base_model_name_or_path") or config.get("_name_or_path")
    if pattern := {m: r for m, r in ranks.items() if r != rank}:
        out["rank_pattern"] = pattern
    return out


def _tie(outputs: dict[str, Output], config: dict) -> tuple[list[tuple[str, str]], bool]:
    """Drop ``lm_head.weight`` when the config ties it to the input embedding, as ``save_pretrained`` does."""
    flags = [c["tie_word_embeddings"] for c in (config, config.get("text_config") or {}) if "tie_word_embeddings" in c]
    head = outputs.get("lm_head.weight")
    if not (flags and flags[0]) or head is None:
        return [], False
    inputs = [o for n, o in outputs.items() if n.endswith(_EMBEDDINGS) and o.shape == head.shape]
    if len(inputs) != 1:
        logger.warning("The config ties the word embeddings, but lm_head.weight has no single partner; kept")
        return [], False
    if head.lora or inputs[0].lora:  # PEFT adapted one side only: the trained model has two matrices
        logger.warning("LoRA merged into one of the tied embeddings: writing tie_word_embeddings=false")
        return [], True
    inputs[0].tied.append(outputs.pop("lm_head.weight").src)
    return [(inputs[0].name, "lm_head.weight")], False


def materialize(states: list[dict[str, Any]], out: Output) -> torch.Tensor:
    """The whole output tensor in its output dtype: assembled, LoRA merged in fp32, cast."""
    if out.lora is None:
        return assemble(states, out.src, out.dtype).contiguous()
    a, b, scale, emb = out.lora
    delta = assemble(states, b).float() @ assemble(states, a).float()
    return assemble(states, out.src).float().add_(delta.T if emb else delta, alpha=scale).to(out.dtype).contiguous()


def _bar(plan: Plan, desc: str, progress: bool) -> tqdm:
    return tqdm(total=len(plan.outputs) + len(plan.adapter), desc=desc, unit="tensor", disable=not progress)


def _save(plan: Plan, path: Path, outputs: dict[str, Output], bar: tqdm) -> None:
    """One safetensors file, its shards mapped afresh, so that the pages of the files before are let go."""
    states, tensors = [load_state(p) for p in plan.info.model_files], {}
    for name, out in outputs.items():
        tensors[name] = materialize(states, out)
        bar.update()
    del states
    save_file(tensors, path, metadata={"format": "pt"})
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)


def write_model(plan: Plan, folder: Path, max_bytes: int, progress: bool) -> list[str]:
    """The planned weights as ``save_pretrained`` writes them (files up to ``max_bytes``, an index), and config."""
    meta = {n: torch.empty(o.shape, dtype=o.dtype, device="meta") for n, o in plan.outputs.items()}
    split = split_torch_state_dict_into_shards(meta, filename_pattern="model{suffix}.safetensors",
                                               max_shard_size=max_bytes)  # fmt: skip
    with _bar(plan, "Converting", progress) as bar:
        for filename, names in split.filename_to_tensors.items():
            _save(plan, folder / filename, {n: plan.outputs[n] for n in names}, bar)
        if plan.adapter:
            (folder / ADAPTER_DIR).mkdir()
            (folder / ADAPTER_DIR / "adapter_config.json").write_text(json.dumps(plan.adapter_config, indent=2) + "\n")
            _save(plan, folder / ADAPTER_DIR / "adapter_model.safetensors", plan.adapter, bar)
    if split.is_sharded:
        total = sum(math.prod(o.shape) for o in plan.outputs.values())
        index = {"metadata": {"total_parameters": total, **split.metadata}, "weight_map": split.tensor_to_filename}
        (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    for f in sorted(plan.hf_dir.iterdir()):  # generation config, tokenizer, custom code
        if f.is_file() and not _WEIGHT_FILE.search(f.name) and f.name != "config.json":
            shutil.copy2(f, folder / f.name)
    config = json.loads(json.dumps(plan.config))
    config.update({k: plan.dtype_name for k in ("dtype", "torch_dtype") if k in config})
    config.setdefault("dtype", plan.dtype_name)
    for cfg in (config, config.get("text_config") or {}) if plan.untie else ():
        if "tie_word_embeddings" in cfg:
            cfg["tie_word_embeddings"] = False
    (folder / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return list(split.filename_to_tensors)


def check_against_config(plan: Plan, trust_remote_code: bool) -> None:
    """Names and shapes against the model transformers builds from the config on the meta device."""
    try:
        import transformers

        config = transformers.AutoConfig.from_pretrained(plan.hf_dir, trust_remote_code=trust_remote_code)
        arch = getattr(transformers, (getattr(config, "architectures", None) or [""])[0], None)  # e.g. a critic's
        with torch.device("meta"):
            auto = transformers.AutoModelForCausalLM
            model = arch(config) if arch else auto.from_config(config, trust_remote_code=trust_remote_code)
    except Exception as err:  # noqa: BLE001 - an extra check: an architecture transformers cannot build skips it
        logger.warning("transformers could not build the config's model (%s); names and shapes not checked", err)
        return
    shapes = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    groups: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(param), []).append(name)
    for keep, drop in plan.tied:
        if not any(keep in g and drop in g for g in groups.values()):
            raise CheckpointError(f"{drop} was stored as {keep}, but the config's model does not tie them")
    dropped = {name for g in groups.values() for name in g[1:]}
    if missing := [n for n in shapes if n not in plan.outputs and n not in dropped and not n.endswith("inv_freq")]:
        raise CheckpointError(
            f"{plan.info.actor_dir}: the checkpoint lacks {len(missing)} tensor(s) the config's model has: "
            f"{', '.join(missing[:8])}{' ...' if len(missing) > 8 else ''}"
        )
    for out in plan.outputs.values():
        if out.name in shapes and shapes[out.name] != out.shape:
            raise CheckpointError(
                f"{out.name}: the shards give shape {list(out.shape)} but the config's model expects "
                f"{list(shapes[out.name])} (files {out.src.describe_files()})"
            )


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(
        a.reshape(-1).contiguous().view(torch.uint8), b.reshape(-1).contiguous().view(torch.uint8)
    )


def _verify_tensor(plan: Plan, states: list[dict[str, Any]], out: Output, written: torch.Tensor, path: Path) -> None:
    """``written`` against every rank's piece, DTensor pieces located by ``torch.chunk`` as ``Shard`` defines them."""
    if tuple(written.shape) != out.shape or written.dtype != out.dtype:
        raise CheckpointError(
            f"{path}: {out.name} is {list(written.shape)} {written.dtype}, expected {list(out.shape)} {out.dtype}"
        )
    if out.lora is not None:
        if not _same(materialize(states, out), written):
            raise CheckpointError(f"{path}: {out.name} differs from the merged LoRA weight of the checkpoint")
        return
    for src in [out.src, *out.tied]:
        for p in src.pieces:
            view = written[tuple(slice(o, o + s) for o, s in zip(p.offsets, p.shape, strict=True))]
            if p.split:
                view = written
                for dim, parts, index in p.split:
                    chunks = torch.chunk(view, parts, dim=dim)
                    view = chunks[index] if index < len(chunks) else view.narrow(dim, view.shape[dim], 0)
            if not _same(local(states, p).to(written.dtype), view):
                raise CheckpointError(
                    f"{path}: {out.name} differs from rank {p.rank}'s shard in {plan.info.model_files[p.rank]} "
                    f"({src.key})"
                )


def verify_files(plan: Plan, folder: Path, progress: bool) -> None:
    """Check the shards' CRCs, then every rank's every piece against the written files, bit for bit."""
    for path in plan.info.model_files:
        try:
            with zipfile.ZipFile(path) as z:
                bad = z.testzip()
        except (zipfile.BadZipFile, OSError) as err:
            bad = str(err)
        if bad is not None:
            raise CheckpointError(f"{path}: CRC check failed for {bad}; the file is corrupt")
    states = [load_state(p) for p in plan.info.model_files]
    groups = [(sorted(folder.glob("*.safetensors")), plan.outputs)]
    groups += [([folder / ADAPTER_DIR / "adapter_model.safetensors"], plan.adapter)] if plan.adapter else []
    with _bar(plan, "Verifying", progress) as bar:
        for paths, expected in groups:
            seen = set()
            for path in paths:
                try:
                    with safe_open(path, "pt") as st:
                        for name in st.keys():
                            if name not in expected:
                                raise CheckpointError(f"{path}: holds {name}, which the checkpoint does not")
                            _verify_tensor(plan, states, expected[name], st.get_tensor(name), path)
                            seen.add(name)
                            bar.update()
                except SafetensorError as err:
                    raise CheckpointError(f"{path}: unreadable ({err})") from err
            if missing := sorted(set(expected) - seen):
                raise CheckpointError(f"{folder}: {len(missing)} tensor(s) missing from the output: {missing[:5]}")


def _open(checkpoint_dir: str | os.PathLike, hf_dir: str | os.PathLike | None, dtype: torch.dtype | None,
          merge_lora: bool, lora_alpha: float | None) -> Plan:  # fmt: skip
    info = inspect_checkpoint(checkpoint_dir)
    srcs = sources(info.model_files, [load_state(p) for p in info.model_files])
    hf = Path(hf_dir).expanduser().resolve() if hf_dir is not None else info.hf_dir
    return make_plan(info, srcs, hf, dtype, merge_lora, lora_alpha)


@dataclass(frozen=True)
class ConversionResult:
    """What :func:`convert_checkpoint` wrote."""

    out_dir: Path
    world_size: int
    fsdp_version: int | None
    num_tensors: int
    num_parameters: int
    dtype: str
    bytes_written: int
    weight_files: tuple[str, ...]
    lora: str | None  # "merged", "adapter" or None
    verified: bool
    seconds: float

    def summary(self) -> str:
        lora = {"merged": ", LoRA merged", "adapter": f", LoRA adapter in {ADAPTER_DIR}/"}.get(self.lora or "", "")
        return (
            f"Converted {self.num_parameters:,} parameters ({self.num_tensors} tensors) from {self.world_size} "
            f"FSDP{self.fsdp_version or ''} shard(s) to {self.dtype}{lora}: {self.bytes_written / 1e6:,.1f} MB in "
            f"{len(self.weight_files)} file(s) in {self.seconds:.1f} s{', verified' if self.verified else ''} "
            f"-> {self.out_dir}"
        )


def convert_checkpoint(checkpoint_dir: str | os.PathLike, out_dir: str | os.PathLike, *, dtype: str = "auto",
                       max_shard_size: int | str = DEFAULT_MAX_SHARD_SIZE, force: bool = False, verify: bool = False,
                       merge_lora: bool = True, hf_dir: str | os.PathLike | None = None,
                       lora_alpha: float | None = None, trust_remote_code: bool = False,
                       progress: bool = True) -> ConversionResult:  # fmt: skip
    """Convert a verl FSDP actor checkpoint (``<ckpt>/global_step_N/actor``) into a Hugging Face model folder.

    ``dtype`` ``auto`` keeps the stored dtype; ``verify`` re-reads every written tensor before publishing;
    ``merge_lora=False`` writes a PEFT adapter in ``out_dir/lora_adapter``. The CLI's ``--help`` says the rest.
    Raises :class:`OutputExistsError` for a non-empty ``out_dir`` without ``force``, and :class:`CheckpointError`
    for a checkpoint that cannot be converted; nothing is written then.
    """
    start = time.perf_counter()
    if dtype not in DTYPES:
        raise CheckpointError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    max_bytes = parse_size(max_shard_size)
    out = Path(out_dir).expanduser().resolve()
    actor = Path(checkpoint_dir).expanduser().resolve()
    if out == actor or out in actor.parents:
        raise CheckpointError(f"{out}: the output folder would contain the checkpoint itself")
    if out.exists() and not force and (not out.is_dir() or any(out.iterdir())):
        raise OutputExistsError(f"{out} already exists; pass force=True (CLI: --force) to replace it")
    plan = _open(checkpoint_dir, hf_dir, DTYPES[dtype], merge_lora, lora_alpha)
    try:
        with staging_dir(out, replace=force) as tmp:
            files = write_model(plan, tmp, max_bytes, progress)
            written = sum(f.stat().st_size for f in tmp.rglob("*.safetensors"))
            if verify:
                check_against_config(plan, trust_remote_code)
                verify_files(plan, tmp, progress)
    except PublishError as err:
        raise OutputExistsError(f"{err}{'' if force else '; pass force=True (CLI: --force) to replace it'}") from err
    everything = [*plan.outputs.values(), *plan.adapter.values()]
    return ConversionResult(
        out, plan.info.world_size, plan.info.fsdp_version, len(everything),
        sum(math.prod(o.shape) for o in everything), plan.dtype_name, written, tuple(files), plan.lora_mode, verify,
        time.perf_counter() - start,
    )  # fmt: skip


def verify_conversion(checkpoint_dir: str | os.PathLike, out_dir: str | os.PathLike, *,
                      hf_dir: str | os.PathLike | None = None, lora_alpha: float | None = None,
                      trust_remote_code: bool = False, progress: bool = False) -> None:  # fmt: skip
    """Check a converted folder against the checkpoint, bit for bit; LoRA counts as merged without ``lora_adapter``."""
    out = Path(out_dir).expanduser().resolve()
    plan = _open(checkpoint_dir, hf_dir, None, not (out / ADAPTER_DIR).is_dir(), lora_alpha)
    for f in sorted(out.glob("*.safetensors")):
        with safe_open(f, "pt") as st:
            for name in st.keys():
                if name in plan.outputs and plan.outputs[name].dtype.is_floating_point:
                    plan.outputs[name].dtype = _FLOATS.get(st.get_slice(name).get_dtype(), plan.outputs[name].dtype)
    check_against_config(plan, trust_remote_code)
    verify_files(plan, out, progress)
