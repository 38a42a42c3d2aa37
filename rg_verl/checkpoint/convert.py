"""The entry point :func:`convert_checkpoint` and its result, :class:`ConversionResult`."""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from .assembly import Checkpoint
from .errors import CheckpointError
from .lora import ADAPTER_DIR
from .plan import Plan, check_against_config, make_plan
from .reading import inspect_checkpoint
from .verify import verify_files
from .writing import check_target, parse_size, staging, write_model

DTYPES: dict[str, torch.dtype | None] = {
    "auto": None,  # keep the dtype the checkpoint stores (what FSDP trained the weights in)
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "fp32": torch.float32,
}


DEFAULT_MAX_SHARD_SIZE = "5GB"


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

    @classmethod
    def of(
        cls, plan: Plan, out_dir: Path, files: list[str], written: int, verified: bool, seconds: float
    ) -> ConversionResult:
        """The result of carrying out ``plan`` into ``out_dir``."""
        everything = plan.outputs + plan.adapter
        return cls(
            out_dir=out_dir,
            world_size=plan.info.world_size,
            fsdp_version=plan.info.fsdp_version,
            num_tensors=len(everything),
            num_parameters=sum(math.prod(o.shape) for o in everything),
            dtype=plan.dtype_name,
            bytes_written=written,
            weight_files=tuple(files),
            lora=plan.lora_mode,
            verified=verified,
            seconds=seconds,
        )

    def summary(self) -> str:
        lora = {"merged": ", LoRA merged", "adapter": f", LoRA adapter in {ADAPTER_DIR}/"}.get(self.lora or "", "")
        fsdp = f"FSDP{self.fsdp_version}" if self.fsdp_version else "FSDP"
        return (
            f"Converted {self.num_parameters:,} parameters ({self.num_tensors} tensors) from {self.world_size} "
            f"{fsdp} shard(s) to {self.dtype}{lora}: {self.bytes_written / 1e6:,.1f} MB in "
            f"{len(self.weight_files)} file(s) in {self.seconds:.1f} s"
            f"{', verified' if self.verified else ''} -> {self.out_dir}"
        )


def convert_checkpoint(
    checkpoint_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    dtype: str = "auto",
    max_shard_size: int | str = DEFAULT_MAX_SHARD_SIZE,
    force: bool = False,
    verify: bool = False,
    merge_lora: bool = True,
    hf_dir: str | os.PathLike | None = None,
    lora_alpha: float | None = None,
    trust_remote_code: bool = False,
    progress: bool = True,
) -> ConversionResult:
    """Convert a verl FSDP actor checkpoint into a Hugging Face model folder.

    Args:
        checkpoint_dir: ``<ckpt>/global_step_N/actor``: the ``model_world_size_W_rank_r.pt`` files.
        out_dir: The model folder to create. It must not exist (or be empty) unless ``force``.
        dtype: ``auto`` (the dtype the checkpoint stores, i.e. what FSDP trained in), ``bf16``, ``fp16`` or
            ``fp32``. Only floating-point tensors are cast.
        max_shard_size: Largest safetensors file; above it the weights are split and indexed.
        force: Replace an existing ``out_dir``.
        verify: Before publishing, re-read every written tensor and check it bit for bit against every
            rank's shards, check the shards' zip CRCs, and check names and shapes against the model
            transformers builds from the config.
        merge_lora: Merge LoRA factors into the base weights (default); else write the base model plus a
            PEFT adapter in ``out_dir/lora_adapter``.
        hf_dir: Where config, generation config and tokenizer come from (default ``<checkpoint>/huggingface``).
        lora_alpha: LoRA alpha when the checkpoint lacks ``lora_train_meta.json``.
        trust_remote_code: Let transformers import the config's custom model code for ``verify``'s checks.
        progress: Show a progress bar over tensors.

    Returns:
        A :class:`ConversionResult`; ``result.summary()`` is a one-line report.

    Raises:
        OutputExistsError: ``out_dir`` exists and is not empty, and ``force`` is false.
        CheckpointError: a missing, truncated or corrupt shard, shards that do not fit together (the message
            names the files), or a failed verification. Nothing is written then.
    """
    start = time.perf_counter()
    if dtype not in DTYPES:
        raise CheckpointError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    max_bytes = parse_size(max_shard_size)
    info = inspect_checkpoint(checkpoint_dir)
    out = Path(out_dir).expanduser().resolve()
    if out == info.actor_dir or out in info.actor_dir.parents:
        raise CheckpointError(f"{out}: the output folder would contain the checkpoint itself")
    check_target(out, force)
    hf = Path(hf_dir).expanduser().resolve() if hf_dir is not None else info.hf_dir
    with Checkpoint(info) as ckpt:
        plan = make_plan(ckpt, hf, DTYPES[dtype], merge_lora, lora_alpha)
        with staging(out, force) as tmp:
            files, written = write_model(ckpt, plan, tmp, max_bytes, progress)
            if verify:
                check_against_config(plan, trust_remote_code)
                verify_files(ckpt, plan, tmp, progress)
    return ConversionResult.of(plan, out, files, written, verify, time.perf_counter() - start)
