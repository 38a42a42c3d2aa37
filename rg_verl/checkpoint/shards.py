"""verl's FSDP shard files: the actor folder, each rank's state dict, each tensor's pieces, full tensors."""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import math
import pickle
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.distributed.tensor import DTensor, Replicate, Shard

logger = logging.getLogger(__name__)
_MODEL_FILE = re.compile(r"^model_world_size_(\d+)_rank_(\d+)\.pt$")
_WRAPPERS = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod.")


class CheckpointError(RuntimeError):
    """The checkpoint cannot be converted: a missing, truncated or inconsistent shard, or bad options."""


class OutputExistsError(CheckpointError, FileExistsError):
    """The output folder exists and ``force`` was not given."""


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{path}: unreadable ({err})") from err


@dataclass
class CheckpointInfo:
    """What a ``global_step_N/actor`` folder holds, from its file names and ``fsdp_config.json``."""

    actor_dir: Path
    world_size: int
    fsdp_version: int | None
    model_files: list[Path]  # index = rank
    hf_dir: Path | None
    lora_meta: dict | None


def inspect_checkpoint(actor_dir: str | Path) -> CheckpointInfo:
    """World size, FSDP version, shard files and config folder of a verl FSDP actor checkpoint."""
    actor = Path(actor_dir).expanduser().resolve()
    if not actor.is_dir():
        raise CheckpointError(f"{actor}: not a folder; pass <ckpt>/global_step_N/actor")
    found: dict[int, set[int]] = {}
    for f in actor.iterdir():
        if m := _MODEL_FILE.match(f.name):
            found.setdefault(int(m[1]), set()).add(int(m[2]))
    config_path = actor / "fsdp_config.json"
    config = read_json(config_path) if config_path.is_file() else {}
    world = config.get("world_size") if isinstance(config, dict) else None
    if not isinstance(config, dict) or (world is not None and (not isinstance(world, int) or world < 1)):
        raise CheckpointError(f"{config_path}: needs a positive integer world_size, got {config!r}")
    if world is None and len(found) != 1:
        hint = " (is this the global_step_N folder? pass its actor/ subfolder)" if (actor / "actor").is_dir() else ""
        several = f"model shards for several world sizes {sorted(found)} and no fsdp_config.json to choose"
        raise CheckpointError(f"{actor}: {several if found else 'no model_world_size_*_rank_*.pt files' + hint}")
    if world is not None and found and world not in found:
        raise CheckpointError(f"{config_path} says world_size={world} but the shards are for {sorted(found)}")
    world = world if world is not None else next(iter(found))
    files = [actor / f"model_world_size_{world}_rank_{r}.pt" for r in range(world)]
    if missing := [str(p) for r, p in enumerate(files) if r not in found.get(world, set())]:
        raise CheckpointError(f"missing model shard(s) of a {world}-rank checkpoint: {', '.join(missing)}")
    meta, hf = actor / "lora_train_meta.json", actor / "huggingface"
    return CheckpointInfo(actor, world, config.get("FSDP_version"), files, hf if hf.is_dir() else None,
                          read_json(meta) if meta.is_file() else None)  # fmt: skip


class _Record:
    """Stands in for FSDP1's shard metadata classes while unpickling: keeps their state, runs nothing."""

    def __init__(self, *args: Any) -> None:
        self.args = args

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) == 2 and isinstance(state[1], dict):
            state = {**(state[0] or {}), **state[1]}  # (dict, slots)
        self.__dict__.update(state if isinstance(state, dict) else {"state": state})


class _ShardedTensor(torch.Tensor):
    """Stands in for FSDP1's ``ShardedTensor``, which needs the saving process group to unpickle."""

    def __setstate__(self, state: tuple) -> None:
        self.local_shards = state[0]

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        raise NotImplementedError(f"{func} on a stand-in ShardedTensor")


_ST = "torch.distributed._shard."  # names as the pickles spell them; nothing is imported from there
_FSDP1_GLOBALS = [(_ShardedTensor, f"{_ST}sharded_tensor.api.ShardedTensor"), (lambda *_: _Record, "builtins.getattr")]
_FSDP1_GLOBALS += [(_Record, name) for name in (
    f"{_ST}sharded_tensor.shard.Shard", f"{_ST}metadata.ShardMetadata",
    f"{_ST}sharded_tensor.metadata.TensorProperties",
    "torch.distributed.remote_device._remote_device", f"{_ST}sharded_tensor.metadata.MEM_FORMAT_ENCODING",
    f"{_ST}sharded_tensor.metadata.ShardedTensorMetadata", f"{_ST}sharding_spec.chunk_sharding_spec.ChunkShardingSpec",
)]  # fmt: skip


def load_state(path: Path) -> dict[str, Any]:
    """One rank's state dict, its tensors mapped from the file (``mmap``); nothing in the pickle is run."""
    mesh_log = logging.getLogger("torch.distributed.device_mesh")  # warns that no process group exists: none needed
    level = mesh_log.level
    mesh_log.setLevel(logging.ERROR)
    try:
        with torch.serialization.safe_globals(_FSDP1_GLOBALS):
            state = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
    except pickle.UnpicklingError as err:
        allowed = {name for _, name in _FSDP1_GLOBALS}
        with contextlib.suppress(Exception):
            unsafe = [g for g in torch.serialization.get_unsafe_globals_in_checkpoint(path) if g not in allowed]
            err = f"unsupported object {', '.join(unsafe)}; nothing in it was run" if unsafe else err
        raise CheckpointError(f"{path}: cannot read the shard's state dict ({str(err).splitlines()[0]})") from None
    except (RuntimeError, OSError, EOFError, ValueError, zipfile.BadZipFile) as err:
        raise CheckpointError(f"{path}: cannot read the shard, the file is truncated or corrupt ({err})") from err
    finally:
        mesh_log.setLevel(level)
    if not isinstance(state, dict):
        raise CheckpointError(f"{path}: holds a {type(state).__name__}, not a state dict")
    return state


@dataclass(frozen=True)
class Piece:
    """One rank's part of a tensor: the box at ``offsets`` of size ``shape``."""

    rank: int
    key: str  # the rank's state dict key
    index: int | None  # which local shard of an FSDP1 ShardedTensor
    offsets: tuple[int, ...]
    shape: tuple[int, ...]
    split: tuple[tuple[int, int, int], ...] = ()  # DTensor: (dim, parts, index) of each Shard, as torch.chunk splits


@dataclass
class Source:
    """A full tensor of the checkpoint: its name, shape, dtype and every rank's piece of it."""

    key: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    pieces: list[Piece]
    files: list[Path]

    def unique(self) -> list[Piece]:
        seen: dict[tuple, Piece] = {}
        for p in self.pieces:
            seen.setdefault((p.offsets, p.shape), p)
        return list(seen.values())

    def describe_files(self) -> str:
        return ", ".join(str(self.files[r]) for r in sorted({p.rank for p in self.pieces}))


def local(states: list[dict[str, Any]], piece: Piece) -> torch.Tensor:
    """The tensor of ``piece`` in the loaded ``states`` (one per rank)."""
    value = states[piece.rank][piece.key]
    if isinstance(value, DTensor):
        return value.to_local()
    return value.local_shards[piece.index].tensor if piece.index is not None else value


def assemble(states: list[dict[str, Any]], src: Source, dtype: torch.dtype | None = None) -> torch.Tensor:
    """The full tensor of ``src`` in ``dtype`` (default its own): its distinct pieces copied into place."""
    pieces, dtype = src.unique(), dtype or src.dtype
    if len(pieces) == 1 and pieces[0].shape == src.shape:
        return local(states, pieces[0]).to(dtype)  # the mapped file itself when the dtype stays
    full = torch.empty(src.shape, dtype=dtype)
    for p in pieces:
        full[tuple(slice(o, o + s) for o, s in zip(p.offsets, p.shape, strict=True))].copy_(local(states, p))
    return full


def _pieces(rank: int, key: str, value: Any, path: Path) -> list[Piece] | None:
    if isinstance(value, DTensor):
        mesh, where = value.device_mesh.mesh, f"{path}: {key}"
        coords = (mesh == rank).nonzero().tolist()
        if len(coords) != 1:
            raise CheckpointError(f"{where}: rank {rank} is not in its DTensor's device mesh {mesh.tolist()}")
        offsets, shape, split = [0] * value.ndim, list(value.shape), []
        for placement, parts, index in zip(value.placements, mesh.shape, coords[0], strict=True):
            if type(placement) is Shard:
                dim = placement.dim % value.ndim
                size = -(-shape[dim] // parts)  # torch.chunk's sizes
                start = min(index * size, shape[dim])
                offsets[dim], shape[dim] = offsets[dim] + start, max(0, min(size, shape[dim] - start))
                split.append((dim, parts, index))
            elif type(placement) is not Replicate:
                raise CheckpointError(f"{where}: DTensor placement {placement} cannot be converted")
        if tuple(shape) != tuple(value.to_local().shape):
            raise CheckpointError(
                f"{where}: local shard has shape {list(value.to_local().shape)}, but placements {value.placements} "
                f"of the global shape {list(value.shape)} over mesh {list(mesh.shape)} give {shape}"
            )
        return [Piece(rank, key, None, tuple(offsets), tuple(shape), tuple(split))]
    if isinstance(value, _ShardedTensor):
        return [
            Piece(rank, key, i, tuple(int(o) for o in s.metadata.shard_offsets), tuple(s.tensor.shape))
            for i, s in enumerate(value.local_shards)
        ]
    if isinstance(value, torch.Tensor):
        return [Piece(rank, key, None, (0,) * value.ndim, tuple(value.shape))]
    return None


def sources(files: list[Path], states: list[dict[str, Any]]) -> dict[str, Source]:
    """Every tensor of the checkpoint under its unwrapped name, checked to fit together across ranks."""
    found: dict[str, Source] = {}
    skipped, per_rank = set(), []
    for rank, (path, state) in enumerate(zip(files, states, strict=True)):
        names = set()
        for raw, value in state.items():
            key = str(raw)
            for prefix in _WRAPPERS:
                key = key.replace(prefix, "")
            if key.endswith("_flat_param"):
                raise CheckpointError(
                    f"{path}: {key} is an FSDP1 flat parameter (LOCAL_STATE_DICT), which carries no parameter "
                    "shapes to unflatten; verl saves SHARDED_STATE_DICT, which this converter reads"
                )
            if (pieces := _pieces(rank, str(raw), value, path)) is None:
                skipped.add(key)
                continue
            if key in names:
                raise CheckpointError(f"{path}: two entries map to the same name {key}")
            names.add(key)
            src = found.setdefault(key, Source(key, tuple(value.shape), value.dtype, [], files))
            if (src.shape, src.dtype) != (tuple(value.shape), value.dtype):
                raise CheckpointError(
                    f"{key}: {path} has shape {list(value.shape)} {value.dtype} but {files[0]} has "
                    f"{list(src.shape)} {src.dtype}; the shards are not from one save"
                )
            src.pieces += pieces
        per_rank.append(names)
    if skipped:
        logger.warning("Skipping non-tensor state dict entries: %s", ", ".join(sorted(skipped)))
    for path, names in zip(files[1:], per_rank[1:], strict=True):
        if names != per_rank[0]:
            raise CheckpointError(
                f"{path} holds different tensors than {files[0]}: missing {sorted(per_rank[0] - names)[:5]}, "
                f"extra {sorted(names - per_rank[0])[:5]}; the shards are not from one save"
            )
    for src in found.values():
        boxes = [(p.offsets, p.shape) for p in src.unique() if math.prod(p.shape)]
        fits = all(0 <= o and o + s <= n for off, shp in boxes for o, s, n in zip(off, shp, src.shape, strict=True))
        overlap = any(
            all(oa < ob + sb and ob < oa + sa for oa, sa, ob, sb in zip(a[0], a[1], b[0], b[1], strict=True))
            for a, b in itertools.combinations(boxes, 2)
        )
        if not fits or overlap or sum(math.prod(s) for _, s in boxes) != math.prod(src.shape):
            raise CheckpointError(
                f"{src.key}: the shards do not tile its shape {list(src.shape)} (files {src.describe_files()})"
            )
    return found
