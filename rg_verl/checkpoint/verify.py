"""Checking a converted folder against the checkpoint, bit for bit: :func:`verify_conversion`."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import torch

from .assembly import Checkpoint, bits_equal
from .errors import CheckpointError
from .lora import ADAPTER_DIR
from .plan import Output, Plan, check_against_config, make_plan
from .reading import inspect_checkpoint
from .writing import SAFETENSORS_DTYPES, materialize, progress_bar


def verify_conversion(
    checkpoint_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    hf_dir: str | os.PathLike | None = None,
    lora_alpha: float | None = None,
    trust_remote_code: bool = False,
    progress: bool = False,
) -> None:
    """Check a converted folder against the checkpoint: every tensor, every rank's shard, bit for bit.

    The output dtype is read from the output; LoRA counts as merged unless ``out_dir/lora_adapter`` exists.

    Raises:
        CheckpointError: a tensor is missing, extra or different (the message names it and the shard file),
            a shard fails its CRC check, or names and shapes do not fit the config's model.
    """
    info = inspect_checkpoint(checkpoint_dir)
    out = Path(out_dir).expanduser().resolve()
    hf = Path(hf_dir).expanduser().resolve() if hf_dir is not None else info.hf_dir
    with Checkpoint(info) as ckpt:
        plan = make_plan(ckpt, hf, None, not (out / ADAPTER_DIR).is_dir(), lora_alpha)
        written = _read_output_dtypes(out)
        for o in plan.outputs:
            if o.name in written and o.dtype.is_floating_point:
                o.dtype = written[o.name]
        check_against_config(plan, trust_remote_code)
        verify_files(ckpt, plan, out, progress)


def _read_output_dtypes(folder: Path) -> dict[str, torch.dtype]:
    from safetensors import safe_open

    names = {v: k for k, v in SAFETENSORS_DTYPES.items()}
    dtypes = {}
    for f in sorted(folder.glob("*.safetensors")):
        with safe_open(f, "pt") as st:
            for k in st.keys():
                dtypes[k] = names.get(st.get_slice(k).get_dtype())
    return dtypes


def verify_files(ckpt: Checkpoint, plan: Plan, folder: Path, progress: bool) -> None:
    """Re-read the written files and check every rank's every piece against them, bit for bit.

    DTensor pieces are located independently of the assembler, by splitting the written tensor with
    ``torch.chunk`` as DTensor defines ``Shard``; ShardedTensor pieces by their saved offsets.
    """
    from safetensors import SafetensorError, safe_open

    for f in ckpt.files:  # zip CRCs: catches flipped bits anywhere in the shards
        try:
            bad = f.zip.testzip()
        except (zipfile.BadZipFile, OSError) as err:
            bad = str(err)
        if bad is not None:
            raise CheckpointError(f"{f.path}: CRC check failed for {bad}; the file is corrupt")
    groups = [(sorted(folder.glob("*.safetensors")), {o.name: o for o in plan.outputs})]
    if plan.adapter:
        groups.append(([folder / ADAPTER_DIR / "adapter_model.safetensors"], {o.name: o for o in plan.adapter}))
    bar = progress_bar(len(plan.outputs) + len(plan.adapter), progress, "Verifying")
    try:
        for paths, expected in groups:
            seen = set()
            for path in paths:
                try:
                    with safe_open(path, "pt") as st:
                        for name in st.keys():
                            if name not in expected:
                                raise CheckpointError(f"{path}: holds {name}, which the checkpoint does not")
                            _verify_tensor(ckpt, expected[name], st.get_tensor(name), path)
                            seen.add(name)
                            bar.update()
                except SafetensorError as err:
                    raise CheckpointError(f"{path}: unreadable ({err})") from err
            missing = sorted(set(expected) - seen)
            if missing:
                raise CheckpointError(f"{folder}: {len(missing)} tensor(s) missing from the output: {missing[:5]}")
    finally:
        bar.close()


def _verify_tensor(ckpt: Checkpoint, out: Output, written: torch.Tensor, path: Path) -> None:
    if tuple(written.shape) != out.shape or written.dtype != out.dtype:
        raise CheckpointError(
            f"{path}: {out.name} is {list(written.shape)} {written.dtype}, expected {list(out.shape)} {out.dtype}"
        )
    if out.lora is not None:
        if not bits_equal(materialize(ckpt, out), written):
            raise CheckpointError(f"{path}: {out.name} differs from the merged LoRA weight of the checkpoint")
        return
    for src in [out.base, *out.tied]:
        for p in src.pieces:
            if p.placements is not None:
                view = written
                for (kind, *args), n, c in zip(p.placements, p.mesh_shape, p.coordinate, strict=True):
                    if kind == "shard":
                        chunks = torch.chunk(view, n, dim=args[0])
                        view = chunks[c] if c < len(chunks) else view.narrow(args[0], view.shape[args[0]], 0)
            else:
                view = written[tuple(slice(o, o + s) for o, s in zip(p.offsets, p.ref.shape, strict=True))]
            piece = ckpt.read(p)
            if tuple(view.shape) != tuple(piece.shape) or not bits_equal(piece.to(written.dtype), view):
                raise CheckpointError(
                    f"{path}: {out.name} differs from rank {p.rank}'s shard in {ckpt.files[p.rank].path} ({src.key})"
                )
