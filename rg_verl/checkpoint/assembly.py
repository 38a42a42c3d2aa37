"""From per-rank entries to full tensors.

Each DTensor / ShardedTensor / plain entry becomes a :class:`Source` (global shape, dtype, every rank's
piece); :class:`Checkpoint` opens the shard files and checks that the pieces tile each tensor, and
:func:`assemble` reads the pieces into one full tensor.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .errors import CheckpointError
from .reading import CheckpointInfo, ShardFile
from .unpickler import Record, TensorRef, Wrapper, attrs_of

logger = logging.getLogger(__name__)


_WRAPPER_PREFIXES = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod.")


@dataclass(frozen=True)
class Piece:
    """One rank's part of a tensor: a box of the full tensor at ``offsets`` with ``ref.shape``."""

    rank: int
    ref: TensorRef
    offsets: tuple[int, ...]
    # for DTensor pieces: placements and mesh coordinate, so --verify can re-split with torch.chunk
    placements: tuple[tuple, ...] | None = None
    coordinate: tuple[int, ...] | None = None
    mesh_shape: tuple[int, ...] | None = None


@dataclass
class Source:
    """A full tensor of the checkpoint: its global shape and dtype, and every rank's piece of it."""

    key: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    kind: str  # "dtensor" | "sharded_tensor" | "tensor"
    pieces: list[Piece]  # every rank's pieces, replicas included
    files: dict[int, Path]

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def unique_pieces(self) -> list[Piece]:
        seen: dict[tuple, Piece] = {}
        for p in self.pieces:
            seen.setdefault((p.offsets, p.ref.shape), p)
        return list(seen.values())

    def describe_files(self) -> str:
        return ", ".join(str(self.files[r]) for r in sorted({p.rank for p in self.pieces}))


@dataclass
class _DTensorEntry:
    shape: tuple[int, ...]
    dtype: torch.dtype
    local: TensorRef
    placements: tuple[tuple, ...]
    coordinate: tuple[int, ...] | None
    mesh_ranks: TensorRef | None


@dataclass
class _ShardedEntry:
    shape: tuple[int, ...]
    dtype: torch.dtype
    shards: list[tuple[TensorRef, tuple[int, ...], tuple[int, ...]]]  # (data, offsets, sizes)


def _parse_placement(rec: Any, where: str) -> tuple:
    name = rec.name if isinstance(rec, Record) else type(rec).__name__
    if name == "Shard":
        dim = rec.get("dim", rec.args[0] if rec.args else None)
        if not isinstance(dim, int):
            raise CheckpointError(f"{where}: Shard placement without a dim")
        return ("shard", dim)
    if name == "Replicate":
        return ("replicate",)
    if name == "Partial":
        raise CheckpointError(f"{where}: Partial placement (pending reduction) cannot be converted")
    hint = " (FSDP combined with tensor parallelism is not supported)" if name == "_StridedShard" else ""
    raise CheckpointError(f"{where}: unsupported DTensor placement {name}{hint}")


def _parse_entry(value: Any, path: Path, key: str) -> TensorRef | _DTensorEntry | _ShardedEntry | None:
    where = f"{path}: {key}"
    if isinstance(value, TensorRef):
        return value
    if not isinstance(value, Wrapper):
        return None
    state = attrs_of(value.state)
    if value.cls.endswith("DTensor"):
        local, spec = state.get("_local_tensor"), state.get("_spec")
        if not isinstance(local, TensorRef) or not isinstance(spec, Record):
            raise CheckpointError(f"{where}: DTensor without local data or spec; the file is corrupt")
        placements = tuple(_parse_placement(p, where) for p in spec.get("placements", ()))
        mesh = spec.get("mesh")
        coordinate = mesh.get("_coordinate_on_dim") if isinstance(mesh, Record) else None
        mesh_ranks = mesh.get("mesh") if isinstance(mesh, Record) else None
        order = spec.get("shard_order") or ()
        for entry in order:  # torch >= 2.9 records the order shards were applied; default is mesh order
            mesh_dims = entry.args[1] if isinstance(entry, Record) and len(entry.args) > 1 else ()
            if list(mesh_dims) != sorted(mesh_dims):
                raise CheckpointError(f"{where}: DTensor with a non-default shard order is not supported")
        return _DTensorEntry(
            value.shape,
            value.dtype,
            local,
            placements,
            tuple(coordinate) if coordinate is not None else None,
            mesh_ranks if isinstance(mesh_ranks, TensorRef) else None,
        )
    if value.cls.endswith("ShardedTensor"):
        raw = value.state if isinstance(value.state, tuple | list) else tuple(state.values())
        shards = []
        for item in raw:
            if isinstance(item, list) and all(isinstance(s, Record) and s.name == "Shard" for s in item):
                for s in item:
                    data, meta = s.get("tensor"), s.get("metadata")
                    if not isinstance(data, TensorRef) or not isinstance(meta, Record):
                        raise CheckpointError(f"{where}: ShardedTensor shard without data; the file is corrupt")
                    shards.append(
                        (data, tuple(int(o) for o in meta.get("shard_offsets")), tuple(meta.get("shard_sizes")))
                    )
        return _ShardedEntry(value.shape, value.dtype, shards)
    raise CheckpointError(f"{where}: unsupported tensor subclass {value.cls}")


def _chunk(extent: int, parts: int, index: int) -> tuple[int, int]:
    """(offset, length) of chunk ``index`` when ``torch.chunk`` splits ``extent`` into ``parts``."""
    size = -(-extent // parts) if parts else extent
    start = min(index * size, extent)
    return start, max(0, min(size, extent - start))


def _canonical(key: str) -> str:
    for prefix in _WRAPPER_PREFIXES:
        key = key.replace(prefix, "")
    return key


class Checkpoint:
    """The open shard files of a checkpoint and every tensor's full shape and pieces."""

    def __init__(self, info: CheckpointInfo) -> None:
        self.info = info
        self.files: list[ShardFile] = []
        try:
            for rank, path in enumerate(info.model_files):
                self.files.append(ShardFile(path, rank))
            self.sources = self._collect()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        for f in self.files:
            f.close()
        self.files = []

    def __enter__(self) -> Checkpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def read_into(self, piece: Piece, out: torch.Tensor) -> None:
        self.files[piece.rank].read_into(piece.ref, out)

    def read(self, piece: Piece) -> torch.Tensor:
        return self.files[piece.rank].read(piece.ref)

    def _collect(self) -> dict[str, Source]:
        per_rank: list[dict[str, Any]] = []
        skipped: set[str] = set()
        for f in self.files:
            entries = {}
            for raw_key, value in f.state.items():
                key = _canonical(str(raw_key))
                if key.endswith("_flat_param"):
                    raise CheckpointError(
                        f"{f.path}: {key} is an FSDP1 flat parameter (LOCAL_STATE_DICT), which carries no parameter "
                        "shapes to unflatten; verl saves SHARDED_STATE_DICT, which this converter reads"
                    )
                entry = _parse_entry(value, f.path, key)
                if entry is None:
                    skipped.add(key)
                    continue
                if key in entries:
                    raise CheckpointError(f"{f.path}: two entries map to the same name {key}")
                entries[key] = entry
            per_rank.append(entries)
        if skipped:
            logger.warning("Skipping non-tensor state dict entries: %s", ", ".join(sorted(skipped)))
        keys0 = list(per_rank[0])
        for f, entries in zip(self.files[1:], per_rank[1:], strict=True):
            if set(entries) != set(keys0):
                extra = sorted(set(entries) - set(keys0))[:5]
                lacking = sorted(set(keys0) - set(entries))[:5]
                raise CheckpointError(
                    f"{f.path} holds different tensors than {self.files[0].path}: "
                    f"missing {lacking}, extra {extra}; the shards are not from one save"
                )
        return {key: self._source(key, [entries[key] for entries in per_rank]) for key in keys0}

    def _source(self, key: str, entries: list[Any]) -> Source:
        files = {f.rank: f.path for f in self.files}
        first = entries[0]
        kinds = {type(e) for e in entries}
        if len(kinds) != 1:
            raise CheckpointError(f"{key}: saved as different kinds of tensor by different ranks ({self._paths()})")
        pieces: list[Piece] = []
        if isinstance(first, TensorRef):
            shape, dtype, kind = first.shape, first.dtype, "tensor"
            for rank, e in enumerate(entries):
                self._check_same(key, rank, e.shape, e.dtype, shape, dtype)
                pieces.append(Piece(rank, e, (0,) * len(shape)))
        elif isinstance(first, _ShardedEntry):
            shape, dtype, kind = first.shape, first.dtype, "sharded_tensor"
            for rank, e in enumerate(entries):
                self._check_same(key, rank, e.shape, e.dtype, shape, dtype)
                for ref, offsets, sizes in e.shards:
                    if tuple(ref.shape) != tuple(sizes) or len(offsets) != len(shape):
                        raise CheckpointError(
                            f"{files[rank]}: {key}: local shard of shape {list(ref.shape)} but its metadata says "
                            f"{list(sizes)} at offsets {list(offsets)}"
                        )
                    pieces.append(Piece(rank, ref, offsets))
        else:
            shape, dtype, kind = first.shape, first.dtype, "dtensor"
            coords = [self._coordinate(rank, e) for rank, e in enumerate(entries)]
            ndim = len(first.placements)
            if any(len(e.placements) != ndim or len(c) != ndim for e, c in zip(entries, coords, strict=True)):
                raise CheckpointError(f"{key}: ranks disagree on the device mesh ({self._paths()})")
            mesh_shape = tuple(max(c[i] for c in coords) + 1 for i in range(ndim))
            for rank, (e, coord) in enumerate(zip(entries, coords, strict=True)):
                self._check_same(key, rank, e.shape, e.dtype, shape, dtype)
                if e.placements != first.placements:
                    raise CheckpointError(
                        f"{files[rank]}: {key}: placements {e.placements} differ from rank 0's {first.placements}"
                    )
                offsets, local = [0] * len(shape), list(shape)
                for (kind_, *args), n, c in zip(e.placements, mesh_shape, coord, strict=True):
                    if kind_ == "shard":
                        dim = args[0] % len(shape) if shape else args[0]
                        if not 0 <= dim < len(shape):
                            raise CheckpointError(f"{files[rank]}: {key}: Shard({args[0]}) of a {len(shape)}-d tensor")
                        start, length = _chunk(local[dim], n, c)
                        offsets[dim] += start
                        local[dim] = length
                if tuple(local) != e.local.shape:
                    raise CheckpointError(
                        f"{files[rank]}: {key}: local shard has shape {list(e.local.shape)}, but placements "
                        f"{_fmt_placements(e.placements)} of the global shape {list(shape)} over mesh "
                        f"{list(mesh_shape)} give {local} at coordinate {list(coord)}"
                    )
                pieces.append(Piece(rank, e.local, tuple(offsets), e.placements, coord, mesh_shape))
        source = Source(key, tuple(shape), dtype, kind, pieces, files)
        self._check_tiling(source)
        return source

    def _coordinate(self, rank: int, e: _DTensorEntry) -> tuple[int, ...]:
        if e.coordinate is not None:
            return tuple(int(c) for c in e.coordinate)
        if e.mesh_ranks is not None:  # older torch pickles the mesh's rank tensor
            ranks = self.files[rank].read(e.mesh_ranks)
            where = (ranks == rank).nonzero()
            if len(where) == 1:
                return tuple(int(i) for i in where[0])
        if len(e.placements) == 1:
            return (rank,)
        raise CheckpointError(f"{self.files[rank].path}: cannot tell the rank's place in its device mesh")

    def _check_same(self, key, rank, shape, dtype, shape0, dtype0) -> None:
        if tuple(shape) != tuple(shape0) or dtype != dtype0:
            raise CheckpointError(
                f"{key}: {self.files[rank].path} has shape {list(shape)} {dtype} but {self.files[0].path} has "
                f"{list(shape0)} {dtype0}; the shards are not from one save"
            )

    def _paths(self) -> str:
        return ", ".join(str(f.path) for f in self.files)

    @staticmethod
    def _check_tiling(source: Source) -> None:
        """The distinct pieces must cover the full tensor exactly once."""
        pieces = source.unique_pieces()
        total = sum(p.ref.numel for p in pieces)
        boxes = [(p.offsets, p.ref.shape) for p in pieces if p.ref.numel]
        shape = source.shape
        for dim in range(len(shape)):  # the usual case, slabs along one dim: sort and check they abut
            others = [i for i in range(len(shape)) if i != dim]
            if all(all(off[i] == 0 and shp[i] == shape[i] for i in others) for off, shp in boxes):
                end = 0
                for off, shp in sorted(boxes, key=lambda b: b[0][dim]):
                    if off[dim] != end:
                        break
                    end += shp[dim]
                else:
                    if end == shape[dim] and total == source.numel:
                        return
                break
        fits = all(
            all(0 <= o and o + s <= full for o, s, full in zip(off, shp, source.shape, strict=True))
            for off, shp in boxes
        )
        overlap = any(
            all(oa < ob + sb and ob < oa + sa for oa, sa, ob, sb in zip(a[0], a[1], b[0], b[1], strict=True))
            for i, a in enumerate(boxes)
            for b in boxes[i + 1 :]
        )
        if total != source.numel or not fits or overlap:
            raise CheckpointError(
                f"{source.key}: the shards do not tile its shape {list(source.shape)} "
                f"({total} of {source.numel} elements; files {source.describe_files()})"
            )


def _fmt_placements(placements: tuple[tuple, ...]) -> str:
    return "(" + ", ".join(f"Shard({p[1]})" if p[0] == "shard" else "Replicate()" for p in placements) + ")"


def assemble(ckpt: Checkpoint, source: Source) -> torch.Tensor:
    """The full tensor, read piece by piece into one buffer."""
    pieces = source.unique_pieces()
    if len(pieces) == 1 and pieces[0].ref.shape == source.shape:
        return ckpt.read(pieces[0])
    full = torch.empty(source.shape, dtype=source.dtype)
    for p in pieces:
        if p.ref.numel == 0:
            continue
        view = full[tuple(slice(o, o + s) for o, s in zip(p.offsets, p.ref.shape, strict=True))]
        if view.is_contiguous():
            ckpt.read_into(p, view)
        else:
            view.copy_(ckpt.read(p))
    return full


def bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.numel() == 0:
        return True
    return torch.equal(a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8))
