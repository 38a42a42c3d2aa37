"""Convert a verl FSDP checkpoint (``global_step_N/actor``) into a Hugging Face model folder.

verl's ``FSDPCheckpointManager`` writes, per rank ``r`` of a run with ``W`` ranks:

- ``model_world_size_{W}_rank_{r}.pt``: ``torch.save`` of the rank's ``model.state_dict()``. Under FSDP2
  every entry is a ``DTensor`` (``Shard(dim)`` / ``Replicate`` placements over a device mesh, a 1-device mesh
  when ``W == 1``); under FSDP1 (``SHARDED_STATE_DICT``) every entry is a ``ShardedTensor`` whose local
  shards carry their offsets; anything FSDP did not shard is a plain tensor, replicated on every rank;
- ``optim_*`` / ``extra_state_*`` (ignored here), and on rank 0 ``fsdp_config.json``
  (``{"FSDP_version", "world_size"}``), ``huggingface/`` (config, generation config, tokenizer) and, for
  LoRA runs, ``lora_train_meta.json`` (``r``, ``lora_alpha``, ``task_type``).

The converter reads those files on the CPU, whatever device saved them, without importing or running
anything from the pickles: a restricted unpickler turns DTensors, device meshes and sharded tensors into
plain records of where each rank's piece lies. Tensor data never passes through ``torch.load``: pieces
split along dim 0 (FSDP's default) are copied file to file by the kernel when the dtype stays, or cast
straight from the memory-mapped shard when it changes; anything else is assembled one tensor at a time.
A reader thread prepares the next piece while the main thread writes, and peak memory stays near the
largest piece, not the model. The output is what ``save_pretrained`` writes (``model.safetensors``, or
numbered shards plus ``model.safetensors.index.json``), plus the checkpoint's config, generation config and
tokenizer files. It is built in a hidden temporary folder next to the target and renamed into place at the
end, so an interrupted run leaves no output folder.

Entry points: :func:`convert_checkpoint`, :func:`verify_conversion`, :func:`inspect_checkpoint`. The command
line is ``utils/load_fsdp_to_hf.py``.
"""

from __future__ import annotations

import collections
import json
import logging
import math
import mmap
import os
import pickle
import queue
import re
import shutil
import struct
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

logger = logging.getLogger(__name__)

__all__ = [
    "DTYPES",
    "CheckpointError",
    "CheckpointInfo",
    "ConversionResult",
    "OutputExistsError",
    "convert_checkpoint",
    "inspect_checkpoint",
    "parse_size",
    "verify_conversion",
]

DTYPES: dict[str, torch.dtype | None] = {
    "auto": None,  # keep the dtype the checkpoint stores (what FSDP trained the weights in)
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "fp32": torch.float32,
}
DEFAULT_MAX_SHARD_SIZE = "5GB"
ADAPTER_DIR = "lora_adapter"  # same sub-folder verl's model_merger writes adapters to

_MODEL_FILE = re.compile(r"^model_world_size_(\d+)_rank_(\d+)\.pt$")
_WRAPPER_PREFIXES = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod.")
_PEFT_PREFIX = "base_model.model."
# files of huggingface/ that are weights, not config: never copied next to the converted weights
_WEIGHT_FILE = re.compile(r"(\.safetensors|\.safetensors\.index\.json|\.bin|\.bin\.index\.json|\.pt|\.pth|\.ckpt)$")
_SAFETENSORS_DTYPES = {
    torch.float64: "F64",
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
    torch.float8_e4m3fn: "F8_E4M3",
    torch.float8_e5m2: "F8_E5M2",
}
_STORAGE_DTYPES = {
    "DoubleStorage": torch.float64,
    "FloatStorage": torch.float32,
    "HalfStorage": torch.float16,
    "BFloat16Storage": torch.bfloat16,
    "LongStorage": torch.int64,
    "IntStorage": torch.int32,
    "ShortStorage": torch.int16,
    "CharStorage": torch.int8,
    "ByteStorage": torch.uint8,
    "BoolStorage": torch.bool,
    "UntypedStorage": torch.uint8,
    "Float8_e4m3fnStorage": torch.float8_e4m3fn,
    "Float8_e5m2Storage": torch.float8_e5m2,
}
_IO_CHUNK = 1 << 30  # bytes per read/write system call


class CheckpointError(RuntimeError):
    """The checkpoint cannot be converted: a missing, truncated or inconsistent shard, or bad options."""


class OutputExistsError(CheckpointError, FileExistsError):
    """The output folder exists and ``force`` was not given."""


# --------------------------------------------------------------------------------------------------
# Reading torch.save zip files without running their pickles
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _StorageRef:
    path: Path
    key: str
    dtype: torch.dtype
    numel: int


@dataclass(frozen=True)
class _TensorRef:
    """Where one saved tensor's data lies: a view (offset, shape, stride) of a storage record."""

    storage: _StorageRef
    offset: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]

    @property
    def dtype(self) -> torch.dtype:
        return self.storage.dtype

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def is_contiguous(self) -> bool:
        expected = 1
        for size, stride in zip(reversed(self.shape), reversed(self.stride), strict=True):
            if size != 1 and stride != expected:
                return False
            expected *= size
        return True

    def span(self) -> tuple[int, int]:
        """First and one-past-last storage element the view touches."""
        if self.numel == 0:
            return self.offset, self.offset
        last = self.offset + sum((s - 1) * st for s, st in zip(self.shape, self.stride, strict=True))
        return self.offset, last + 1


@dataclass
class _Wrapper:
    """A tensor subclass instance (DTensor, ShardedTensor) seen through its pickle."""

    cls: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    state: Any = None


class _Record:
    """Stand-in for a class the converter must not import (DeviceMesh, placements, shard metadata...)."""

    qualname = "?"

    def __new__(cls, *args: Any, **kwargs: Any) -> _Record:
        obj = object.__new__(cls)
        obj.args, obj.kwargs, obj.attrs = args, kwargs, {}
        return obj

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        self.attrs.update(_state_dict(state))

    def get(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    @property
    def name(self) -> str:
        return self.qualname.rsplit(".", 1)[-1]

    def __repr__(self) -> str:
        return f"<{self.qualname} args={self.args} attrs={sorted(self.attrs)}>"


def _state_dict(state: Any) -> dict:
    """The attribute dict of a pickled object's state: a dict, or a (dict, slots) pair."""
    if isinstance(state, dict):
        return state
    if isinstance(state, tuple) and len(state) == 2 and all(s is None or isinstance(s, dict) for s in state):
        return {**(state[0] or {}), **(state[1] or {})}
    return {}


_RECORD_TYPES: dict[str, type[_Record]] = {}


def _record_type(qualname: str) -> type[_Record]:
    if qualname not in _RECORD_TYPES:
        _RECORD_TYPES[qualname] = type(qualname.rsplit(".", 1)[-1], (_Record,), {"qualname": qualname})
    return _RECORD_TYPES[qualname]


class _TensorMarker:
    """What the pickle names as ``torch.Tensor`` / ``torch.nn.Parameter`` (never instantiated)."""


def _rebuild_tensor(storage: _StorageRef, offset: int, size: Sequence[int], stride: Sequence[int], *_: Any):
    return _TensorRef(storage, int(offset), tuple(int(s) for s in size), tuple(int(s) for s in stride))


def _rebuild_parameter(data: Any, *_: Any) -> Any:
    return data


def _rebuild_wrapper_subclass(cls: Any, dtype: torch.dtype, size: Sequence[int], *_: Any) -> _Wrapper:
    name = getattr(cls, "qualname", getattr(cls, "__qualname__", str(cls)))
    return _Wrapper(name, dtype, tuple(int(s) for s in size))


def _rebuild_from_type(func: Callable, new_type: Any, args: tuple, state: Any = None) -> Any:
    ret = func(*args)
    if isinstance(ret, _Wrapper):
        ret.state = state
    return ret


def _safe_getattr(obj: Any, name: str) -> Any:
    # pickles spell enum members and nested classes as getattr(Class, "NAME"); only allow that on records.
    # A record type serves for both: nothing reads enum members' values.
    if isinstance(obj, type) and issubclass(obj, _Record):
        return _record_type(f"{obj.qualname}.{name}")
    raise pickle.UnpicklingError(f"getattr on {obj!r} is not allowed")


_ALLOWED_GLOBALS: dict[tuple[str, str], Any] = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("builtins", "slice"): slice,
    ("builtins", "getattr"): _safe_getattr,
    ("_codecs", "encode"): lambda text, encoding="latin1": text.encode(encoding),
    ("torch", "Size"): lambda *a: tuple(*a),
    ("torch", "device"): lambda *a: str(a[0]) if a else "cpu",
    ("torch", "Tensor"): _TensorMarker,
    ("torch.nn.parameter", "Parameter"): _TensorMarker,
    ("torch.serialization", "_get_layout"): lambda name: name,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    ("torch._utils", "_rebuild_wrapper_subclass"): _rebuild_wrapper_subclass,
    ("torch._tensor", "_rebuild_from_type_v2"): _rebuild_from_type,
}


class _SafeUnpickler(pickle.Unpickler):
    """Unpickles a torch state dict into _TensorRef / _Wrapper / _Record objects; runs nothing else."""

    def __init__(self, data: bytes, path: Path) -> None:
        import io

        super().__init__(io.BytesIO(data))
        self.path = path

    def find_class(self, module: str, name: str) -> Any:
        module = {"__builtin__": "builtins", "copy_reg": "copyreg"}.get(module, module)  # protocol 2 names
        if (module, name) in _ALLOWED_GLOBALS:
            return _ALLOWED_GLOBALS[(module, name)]
        if module == "torch" and name in _STORAGE_DTYPES:
            return _STORAGE_DTYPES[name]
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        if module.startswith("torch.distributed."):  # DTensor, DeviceMesh, placements, ShardedTensor...
            return _record_type(f"{module}.{name}")
        raise pickle.UnpicklingError(
            f"unsupported object {module}.{name} in the pickle; the converter reads state dicts of tensors only"
        )

    def persistent_load(self, pid: Any) -> _StorageRef:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise pickle.UnpicklingError(f"unexpected persistent id {pid!r}")
        _, storage_type, key, _location, numel = pid
        dtype = storage_type if isinstance(storage_type, torch.dtype) else torch.uint8
        return _StorageRef(self.path, str(key), dtype, int(numel))


class _ShardFile:
    """One ``model_world_size_W_rank_r.pt``: its pickled state dict and direct reads of its tensor data."""

    def __init__(self, path: Path, rank: int) -> None:
        self.path, self.rank = path, rank
        self._extents: dict[str, tuple[int, int]] = {}
        try:
            self.zip = zipfile.ZipFile(path)
            names = self.zip.namelist()
            pkl = next((n for n in names if n.endswith("/data.pkl") or n == "data.pkl"), None)
            if pkl is None:
                raise CheckpointError(f"{path}: no data.pkl record; not a torch.save checkpoint")
            self._prefix = pkl[: -len("data.pkl")]
            if f"{self._prefix}byteorder" in names:
                order = self.zip.read(f"{self._prefix}byteorder").decode()
                if order != "little":
                    raise CheckpointError(f"{path}: saved with {order}-endian byte order, which is not supported")
            self.state = _SafeUnpickler(self.zip.read(pkl), path).load()
        except CheckpointError:
            raise
        except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, ValueError) as err:
            raise CheckpointError(f"{path}: cannot read the shard, the file is truncated or corrupt ({err})") from err
        except (pickle.UnpicklingError, AttributeError, TypeError, KeyError, IndexError) as err:
            raise CheckpointError(f"{path}: cannot read the shard's state dict ({err})") from err
        if not isinstance(self.state, dict):
            raise CheckpointError(f"{path}: holds a {type(self.state).__name__}, not a state dict")
        self._fd = os.open(path, os.O_RDONLY)
        self._size = os.fstat(self._fd).st_size
        self._map: mmap.mmap | None = None
        self._mapped: torch.Tensor | None = None

    def close(self) -> None:
        self._mapped = None  # the tensor must go before its mapping
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:  # a view is still referenced somewhere; the mapping goes with it
                pass
        self.zip.close()
        os.close(self._fd)

    def _extent(self, storage: _StorageRef) -> tuple[int, int]:
        """(file offset, byte size) of a storage record's data."""
        if storage.key not in self._extents:
            name = f"{self._prefix}data/{storage.key}"
            try:
                info = self.zip.getinfo(name)
            except KeyError:
                raise CheckpointError(f"{self.path}: record {name} is missing; the file is corrupt") from None
            if info.compress_type != zipfile.ZIP_STORED:
                raise CheckpointError(f"{self.path}: record {name} is compressed; torch.save never does that")
            header = os.pread(self._fd, 30, info.header_offset)
            if len(header) != 30 or header[:4] != b"PK\x03\x04":
                raise CheckpointError(f"{self.path}: bad zip header for {name}; the file is corrupt")
            name_len, extra_len = struct.unpack("<HH", header[26:30])
            start = info.header_offset + 30 + name_len + extra_len
            need = storage.numel * storage.dtype.itemsize
            if info.file_size < need:
                raise CheckpointError(
                    f"{self.path}: record {name} holds {info.file_size} bytes, its tensor needs {need}; "
                    "the file is corrupt"
                )
            if start + info.file_size > self._size:
                raise CheckpointError(f"{self.path}: record {name} reaches past the end; the file is truncated")
            self._extents[storage.key] = (start, info.file_size)
        return self._extents[storage.key]

    def _pread_into(self, buf: memoryview, pos: int) -> None:
        done = 0
        while done < len(buf):
            n = os.preadv(self._fd, [buf[done : done + _IO_CHUNK]], pos + done)
            if n <= 0:
                raise CheckpointError(f"{self.path}: unexpected end of file; the file is truncated")
            done += n

    def read_into(self, ref: _TensorRef, out: torch.Tensor) -> None:
        """Fill ``out`` (contiguous, ``ref``'s shape and dtype) with the tensor ``ref`` names."""
        if ref.numel == 0:
            return
        start, size = self._extent(ref.storage)
        item = ref.dtype.itemsize
        lo, hi = ref.span()
        if lo < 0 or hi * item > size:
            raise CheckpointError(f"{self.path}: a tensor view reaches past its storage; the file is corrupt")
        if ref.is_contiguous() and out.is_contiguous():
            self._pread_into(_byte_view(out), start + lo * item)
        else:
            flat = torch.empty(hi - lo, dtype=ref.dtype)
            self._pread_into(_byte_view(flat), start + lo * item)
            out.copy_(flat.as_strided(ref.shape, ref.stride, 0))

    def read(self, ref: _TensorRef) -> torch.Tensor:
        out = torch.empty(ref.shape, dtype=ref.dtype)
        self.read_into(ref, out)
        return out

    def mapped(self, ref: _TensorRef) -> torch.Tensor | None:
        """The contiguous tensor ``ref`` as a view of the file mapped into memory (nothing is read yet).

        None when its bytes are not aligned to its element size (torch.save aligns them; other writers may not).
        """
        start, size = self._extent(ref.storage)
        item = ref.dtype.itemsize
        pos, end = start + ref.offset * item, start + (ref.offset + ref.numel) * item
        if not ref.is_contiguous() or ref.offset < 0 or end > start + size:
            raise CheckpointError(f"{self.path}: a tensor view reaches past its storage; the file is corrupt")
        if pos % item:
            return None
        if self._mapped is None:
            self._map = mmap.mmap(self._fd, 0, access=mmap.ACCESS_COPY)  # private: never writes the file
            self._mapped = torch.frombuffer(self._map, dtype=torch.uint8)
        return self._mapped[pos:end].view(ref.dtype).view(ref.shape)

    def unmap(self, ref: _TensorRef) -> None:
        """Drop the pages of ``ref`` from this process (they stay in the page cache)."""
        if self._map is not None and hasattr(self._map, "madvise"):
            start, _ = self._extent(ref.storage)
            item = ref.dtype.itemsize
            lo = (start + ref.offset * item) // mmap.PAGESIZE * mmap.PAGESIZE
            hi = min(start + (ref.offset + ref.numel) * item, self._size)
            if hi > lo:
                self._map.madvise(mmap.MADV_DONTNEED, lo, hi - lo)

    def copy_to(self, ref: _TensorRef, fd: int) -> None:
        """Append the bytes of the contiguous tensor ``ref`` to the file ``fd``, copied inside the kernel."""
        start, size = self._extent(ref.storage)
        item = ref.dtype.itemsize
        pos, end = start + ref.offset * item, start + (ref.offset + ref.numel) * item
        if ref.offset < 0 or end > start + size:
            raise CheckpointError(f"{self.path}: a tensor view reaches past its storage; the file is corrupt")
        copy = getattr(os, "copy_file_range", None)
        while pos < end:
            count = min(end - pos, _IO_CHUNK)
            n = 0
            if copy is not None:
                try:
                    n = copy(self._fd, fd, count, pos)
                except OSError:  # another file system, or no support: the portable ways below
                    copy = None
            if copy is None:
                try:
                    n = os.sendfile(fd, self._fd, pos, count)
                except OSError:
                    n = os.write(fd, os.pread(self._fd, min(count, 1 << 26), pos))
            if n <= 0:
                raise CheckpointError(f"{self.path}: unexpected end of file; the file is truncated")
            pos += n


def _byte_view(t: torch.Tensor) -> memoryview:
    """A writable byte view of a contiguous CPU tensor's memory."""
    return memoryview(t.reshape(-1).view(torch.uint8).numpy()).cast("B")


# --------------------------------------------------------------------------------------------------
# From per-rank entries to full tensors
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Piece:
    """One rank's part of a tensor: a box of the full tensor at ``offsets`` with ``ref.shape``."""

    rank: int
    ref: _TensorRef
    offsets: tuple[int, ...]
    # for DTensor pieces: placements and mesh coordinate, so --verify can re-split with torch.chunk
    placements: tuple[tuple, ...] | None = None
    coordinate: tuple[int, ...] | None = None
    mesh_shape: tuple[int, ...] | None = None


@dataclass
class _Source:
    """A full tensor of the checkpoint: its global shape and dtype, and every rank's piece of it."""

    key: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    kind: str  # "dtensor" | "sharded_tensor" | "tensor"
    pieces: list[_Piece]  # every rank's pieces, replicas included
    files: dict[int, Path]

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def unique_pieces(self) -> list[_Piece]:
        seen: dict[tuple, _Piece] = {}
        for p in self.pieces:
            seen.setdefault((p.offsets, p.ref.shape), p)
        return list(seen.values())

    def describe_files(self) -> str:
        return ", ".join(str(self.files[r]) for r in sorted({p.rank for p in self.pieces}))


@dataclass
class _DTensorEntry:
    shape: tuple[int, ...]
    dtype: torch.dtype
    local: _TensorRef
    placements: tuple[tuple, ...]
    coordinate: tuple[int, ...] | None
    mesh_ranks: _TensorRef | None


@dataclass
class _ShardedEntry:
    shape: tuple[int, ...]
    dtype: torch.dtype
    shards: list[tuple[_TensorRef, tuple[int, ...], tuple[int, ...]]]  # (data, offsets, sizes)


def _parse_placement(rec: Any, where: str) -> tuple:
    name = rec.name if isinstance(rec, _Record) else type(rec).__name__
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


def _parse_entry(value: Any, path: Path, key: str) -> _TensorRef | _DTensorEntry | _ShardedEntry | None:
    where = f"{path}: {key}"
    if isinstance(value, _TensorRef):
        return value
    if not isinstance(value, _Wrapper):
        return None
    state = _state_dict(value.state)
    if value.cls.endswith("DTensor"):
        local, spec = state.get("_local_tensor"), state.get("_spec")
        if not isinstance(local, _TensorRef) or not isinstance(spec, _Record):
            raise CheckpointError(f"{where}: DTensor without local data or spec; the file is corrupt")
        placements = tuple(_parse_placement(p, where) for p in spec.get("placements", ()))
        mesh = spec.get("mesh")
        coordinate = mesh.get("_coordinate_on_dim") if isinstance(mesh, _Record) else None
        mesh_ranks = mesh.get("mesh") if isinstance(mesh, _Record) else None
        order = spec.get("shard_order") or ()
        for entry in order:  # torch >= 2.9 records the order shards were applied; default is mesh order
            mesh_dims = entry.args[1] if isinstance(entry, _Record) and len(entry.args) > 1 else ()
            if list(mesh_dims) != sorted(mesh_dims):
                raise CheckpointError(f"{where}: DTensor with a non-default shard order is not supported")
        return _DTensorEntry(
            value.shape,
            value.dtype,
            local,
            placements,
            tuple(coordinate) if coordinate is not None else None,
            mesh_ranks if isinstance(mesh_ranks, _TensorRef) else None,
        )
    if value.cls.endswith("ShardedTensor"):
        raw = value.state if isinstance(value.state, (tuple, list)) else tuple(state.values())
        shards = []
        for item in raw:
            if isinstance(item, list) and all(isinstance(s, _Record) and s.name == "Shard" for s in item):
                for s in item:
                    data, meta = s.get("tensor"), s.get("metadata")
                    if not isinstance(data, _TensorRef) or not isinstance(meta, _Record):
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


# --------------------------------------------------------------------------------------------------
# The checkpoint folder
# --------------------------------------------------------------------------------------------------


@dataclass
class CheckpointInfo:
    """What a ``global_step_N/actor`` folder holds, read from its file names and ``fsdp_config.json``."""

    actor_dir: Path
    world_size: int
    fsdp_version: int | None
    model_files: list[Path]  # index = rank
    hf_dir: Path | None
    lora_meta: dict | None


def inspect_checkpoint(actor_dir: str | os.PathLike) -> CheckpointInfo:
    """World size, FSDP version, shard files and config folder of a verl FSDP actor checkpoint.

    Raises:
        CheckpointError: no model shards, a rank's file missing, or ``fsdp_config.json`` disagreeing
            with the file names.
    """
    actor = Path(actor_dir).expanduser().resolve()
    if not actor.is_dir():
        raise CheckpointError(f"{actor}: not a folder; pass <ckpt>/global_step_N/actor")
    found: dict[int, dict[int, Path]] = {}
    for f in actor.iterdir():
        m = _MODEL_FILE.match(f.name)
        if m:
            found.setdefault(int(m.group(1)), {})[int(m.group(2))] = f
    config_path = actor / "fsdp_config.json"
    fsdp_config: dict = {}
    if config_path.is_file():
        try:
            fsdp_config = json.loads(config_path.read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise CheckpointError(f"{config_path}: unreadable ({err})") from err
    world_size = fsdp_config.get("world_size")
    if world_size is not None and (not isinstance(world_size, int) or world_size < 1):
        raise CheckpointError(f"{config_path}: world_size must be a positive integer, got {world_size!r}")
    if world_size is None:
        if not found:
            hint = (
                " (is this the global_step_N folder? pass its actor/ subfolder)" if (actor / "actor").is_dir() else ""
            )
            raise CheckpointError(f"{actor}: no model_world_size_*_rank_*.pt files{hint}")
        if len(found) > 1:
            raise CheckpointError(
                f"{actor}: model shards for several world sizes {sorted(found)} and no fsdp_config.json to choose"
            )
        world_size = next(iter(found))
    elif found and world_size not in found:
        raise CheckpointError(
            f"{config_path} says world_size={world_size} but the shards are for world size {sorted(found)}"
        )
    files = found.get(world_size, {})
    expected = [actor / f"model_world_size_{world_size}_rank_{r}.pt" for r in range(world_size)]
    missing = [str(p) for r, p in enumerate(expected) if r not in files]
    if missing:
        raise CheckpointError(f"missing model shard(s) of a {world_size}-rank checkpoint: {', '.join(missing)}")
    lora_meta = None
    meta_path = actor / "lora_train_meta.json"
    if meta_path.is_file():
        try:
            lora_meta = json.loads(meta_path.read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise CheckpointError(f"{meta_path}: unreadable ({err})") from err
    hf_dir = actor / "huggingface"
    return CheckpointInfo(
        actor,
        int(world_size),
        fsdp_config.get("FSDP_version"),
        expected,
        hf_dir if hf_dir.is_dir() else None,
        lora_meta,
    )


class _Checkpoint:
    """The open shard files of a checkpoint and every tensor's full shape and pieces."""

    def __init__(self, info: CheckpointInfo) -> None:
        self.info = info
        self.files: list[_ShardFile] = []
        try:
            for rank, path in enumerate(info.model_files):
                self.files.append(_ShardFile(path, rank))
            self.sources = self._collect()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        for f in self.files:
            f.close()
        self.files = []

    def __enter__(self) -> _Checkpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def read_into(self, piece: _Piece, out: torch.Tensor) -> None:
        self.files[piece.rank].read_into(piece.ref, out)

    def read(self, piece: _Piece) -> torch.Tensor:
        return self.files[piece.rank].read(piece.ref)

    def _collect(self) -> dict[str, _Source]:
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

    def _source(self, key: str, entries: list[Any]) -> _Source:
        files = {f.rank: f.path for f in self.files}
        first = entries[0]
        kinds = {type(e) for e in entries}
        if len(kinds) != 1:
            raise CheckpointError(f"{key}: saved as different kinds of tensor by different ranks ({self._paths()})")
        pieces: list[_Piece] = []
        if isinstance(first, _TensorRef):
            shape, dtype, kind = first.shape, first.dtype, "tensor"
            for rank, e in enumerate(entries):
                self._check_same(key, rank, e.shape, e.dtype, shape, dtype)
                pieces.append(_Piece(rank, e, (0,) * len(shape)))
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
                    pieces.append(_Piece(rank, ref, offsets))
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
                pieces.append(_Piece(rank, e.local, tuple(offsets), e.placements, coord, mesh_shape))
        source = _Source(key, tuple(shape), dtype, kind, pieces, files)
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
    def _check_tiling(source: _Source) -> None:
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


def _assemble(ckpt: _Checkpoint, source: _Source) -> torch.Tensor:
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


# --------------------------------------------------------------------------------------------------
# Output plan: names, LoRA, tied weights, dtype, files
# --------------------------------------------------------------------------------------------------


@dataclass
class _Lora:
    a: _Source
    b: _Source
    scale: float
    embedding: bool  # lora_embedding_A/B: delta = (B @ A).T


@dataclass
class _Output:
    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    base: _Source
    lora: _Lora | None = None
    tied: list[_Source] = field(default_factory=list)  # sources of tied names dropped in favour of this one

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


_LORA_PARAM = re.compile(r"^(?P<module>.+)\.(?P<kind>lora_A|lora_B)\.(?P<adapter>[^.]+)\.weight$")
_LORA_EMB = re.compile(r"^(?P<module>.+)\.(?P<kind>lora_embedding_A|lora_embedding_B)\.(?P<adapter>[^.]+)$")
_BASE_LAYER = re.compile(r"^(?P<module>.+)\.base_layer\.(?P<param>[^.]+)$")
_SAVED_MODULE = re.compile(r"^(?P<module>.+)\.modules_to_save\.(?P<adapter>[^.]+)\.(?P<rest>.+)$")
_ORIGINAL_MODULE = re.compile(r"^.+\.original_module\..+$")


@dataclass
class _LoraSplit:
    base: dict[str, _Source]  # HF name -> source
    adapters: dict[str, dict[str, _Source]]  # module -> {"A"/"B"/"emb_A"/"emb_B": source}
    adapter_name: str | None


def _split_lora(sources: dict[str, _Source]) -> _LoraSplit:
    """Separate PEFT's keys into base weights (under their Hugging Face names) and LoRA factors."""
    peft = any(k.startswith(_PEFT_PREFIX) for k in sources)
    base: dict[str, _Source] = {}
    adapters: dict[str, dict[str, _Source]] = {}
    names: set[str] = set()
    for key, src in sources.items():
        name = key[len(_PEFT_PREFIX) :] if peft and key.startswith(_PEFT_PREFIX) else key
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
    return _LoraSplit(base, adapters, next(iter(names), None))


def _hf_config(hf_dir: Path | None) -> dict:
    if hf_dir is None or not (hf_dir / "config.json").is_file():
        where = hf_dir or "the checkpoint"
        raise CheckpointError(
            f"no config.json in {where}; verl writes it to <actor>/huggingface. Pass the model's config folder "
            "as hf_dir (CLI: --hf-dir)"
        )
    try:
        return json.loads((hf_dir / "config.json").read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{hf_dir / 'config.json'}: unreadable ({err})") from err


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
class _Plan:
    info: CheckpointInfo
    hf_dir: Path
    config: dict
    outputs: list[_Output]  # the model's weights, in checkpoint order
    adapter: list[_Output]  # PEFT adapter tensors (keep_lora), under the names PEFT saves them
    adapter_config: dict | None
    lora_mode: str | None  # "merged" | "adapter" | None
    dtype_name: str  # what config.json says after conversion
    tied: list[tuple[str, str]]  # (kept name, dropped name)
    untie: bool = False  # write tie_word_embeddings: false (LoRA merged into one side of a tied pair)


def _plan(
    ckpt: _Checkpoint,
    hf_dir: Path | None,
    dtype: torch.dtype | None,
    merge_lora: bool,
    lora_alpha: float | None,
) -> _Plan:
    info = ckpt.info
    config = _hf_config(hf_dir)
    split = _split_lora(ckpt.sources)
    if split.adapters and not split.base:
        raise CheckpointError(
            f"{info.actor_dir}: the checkpoint holds only LoRA weights (save_lora_only); the base model's "
            "weights are needed and are not in it"
        )

    def out_dtype(src: _Source) -> torch.dtype:
        return dtype if dtype is not None and src.dtype.is_floating_point else src.dtype

    outputs = {name: _Output(name, src.shape, out_dtype(src), src) for name, src in split.base.items()}
    adapter: list[_Output] = []
    adapter_config = None
    if split.adapters:
        alpha = lora_alpha if lora_alpha is not None else (info.lora_meta or {}).get("lora_alpha")
        if alpha is None:
            raise CheckpointError(
                f"{info.actor_dir}: LoRA weights but no lora_alpha (lora_train_meta.json is missing); pass lora_alpha"
            )
        ranks: dict[str, int] = {}
        for module, parts in sorted(split.adapters.items()):
            emb = "emb_A" in parts
            a, b = (parts["emb_A"], parts["emb_B"]) if emb else (parts["A"], parts["B"])
            rank = ranks[module] = a.shape[0]
            base = outputs.get(f"{module}.weight")
            if base is None:
                raise CheckpointError(f"{module}: LoRA factors without the base weight {module}.weight")
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
            if merge_lora:
                scale = float(alpha) / (math.sqrt(rank) if (info.lora_meta or {}).get("use_rslora") else rank)
                base.lora = _Lora(a, b, scale, emb)
            else:
                stem = f"{_PEFT_PREFIX}{module}"
                names = ("lora_embedding_A", "lora_embedding_B") if emb else ("lora_A.weight", "lora_B.weight")
                adapter += [_Output(f"{stem}.{n}", s.shape, s.dtype, s) for n, s in zip(names, (a, b), strict=True)]
        if not merge_lora:
            rank = max(ranks.values())
            targets = sorted({m.rsplit(".", 1)[-1] for m in split.adapters})
            adapter_config = _adapter_config(rank, alpha, targets, (info.lora_meta or {}).get("task_type"), config)
            pattern = {m: r for m, r in ranks.items() if r != rank}
            if pattern:
                adapter_config["rank_pattern"] = pattern

    tied, untie = [], False
    if _tied_flag(config) and "lm_head.weight" in outputs:
        head = outputs["lm_head.weight"]
        inputs = [o for n, o in outputs.items() if n.endswith(_INPUT_EMBEDDINGS) and o.shape == head.shape]
        if len(inputs) == 1 and (head.lora is not None or inputs[0].lora is not None):
            # PEFT adapted one side only: the trained model computes with two different matrices
            untie = True
            logger.warning("LoRA merged into one of the tied embeddings: writing tie_word_embeddings=false")
        elif len(inputs) == 1:
            inputs[0].tied.append(outputs.pop("lm_head.weight").base)  # save_pretrained stores it once
            tied.append((inputs[0].name, "lm_head.weight"))
        else:
            logger.warning("The config ties the word embeddings, but lm_head.weight has no single partner; kept")

    floats = {o.dtype for o in outputs.values() if o.dtype.is_floating_point}
    dtype_name = str(dtype or (floats.pop() if len(floats) == 1 else torch.float32)).removeprefix("torch.")
    lora_mode = ("merged" if merge_lora else "adapter") if split.adapters else None
    return _Plan(
        info, hf_dir, config, list(outputs.values()), adapter, adapter_config, lora_mode, dtype_name, tied, untie
    )


def _check_against_config(plan: _Plan, trust_remote_code: bool) -> None:
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


def _adapter_config(rank: int, alpha: float, targets: list[str], task_type: str | None, config: dict) -> dict:
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
        elif isinstance(v, (set, frozenset)):
            out[k] = sorted(v)
    out["target_modules"] = targets
    out["base_model_name_or_path"] = out.get("base_model_name_or_path") or config.get("_name_or_path") or None
    return out


def _materialize(ckpt: _Checkpoint, out: _Output) -> torch.Tensor:
    """The whole output tensor in its output dtype: assembled, LoRA merged in fp32, cast."""
    full = _assemble(ckpt, out.base)
    for tied in out.tied:
        if tied.unique_pieces() != out.base.unique_pieces() and not _bits_equal(_assemble(ckpt, tied), full):
            raise CheckpointError(
                f"{tied.key} is tied to {out.name} in the config, but the checkpoint holds different values for "
                f"them (files {tied.describe_files()})"
            )
    if out.lora is not None:
        a = _assemble(ckpt, out.lora.a).float()
        b = _assemble(ckpt, out.lora.b).float()
        delta = (b @ a).T if out.lora.embedding else b @ a
        full = full.float().add_(delta, alpha=out.lora.scale)
    return full.to(out.dtype).contiguous()


@dataclass(frozen=True)
class _Span:
    """Bytes to copy unchanged from a shard file into the output."""

    file: _ShardFile
    ref: _TensorRef

    @property
    def dtype(self) -> torch.dtype:
        return self.ref.dtype


class _Buffer:
    """A reusable block of memory: fresh allocations cost a page fault per 4 KiB, reuse costs nothing."""

    def __init__(self) -> None:
        self.data = torch.empty(0, dtype=torch.uint8)

    def view(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        nbytes = math.prod(shape) * dtype.itemsize
        if self.data.numel() < nbytes:
            self.data = torch.empty(0, dtype=torch.uint8)  # free the old block first
            self.data = torch.empty(nbytes, dtype=torch.uint8)
        return self.data[:nbytes].view(dtype).view(shape)


def _produce(
    ckpt: _Checkpoint, out: _Output, take: Callable[[], _Buffer], scratch: _Buffer
) -> Iterator[tuple[torch.Tensor | _Span, _Buffer | None]]:
    """The output tensor's bytes, in order, as (chunk, buffer to give back once written) pairs.

    Tensors split along dim 0 (what FSDP does by default) stream piece by piece: copied file to file when
    the dtype stays, else read and cast into reused buffers. Everything else (other dims, LoRA merges,
    tied copies to compare) is assembled whole.
    """
    pieces = out.base.unique_pieces()
    slabs = all(all(o == 0 for o in p.offsets[1:]) and p.ref.shape[1:] == out.shape[1:] for p in pieces)
    if out.lora is not None or any(t.unique_pieces() != pieces for t in out.tied) or not slabs:
        yield _materialize(ckpt, out), None
        return
    for p in sorted(pieces, key=lambda p: p.offsets[:1]):
        if p.ref.numel == 0:
            continue
        if out.dtype == p.ref.dtype and p.ref.is_contiguous():
            yield _Span(ckpt.files[p.rank], p.ref), None  # same bytes: copied file to file by the kernel
            continue
        buffer = take()
        chunk = buffer.view(p.ref.shape, out.dtype)
        shard = ckpt.files[p.rank]
        mapped = shard.mapped(p.ref) if p.ref.is_contiguous() else None
        if mapped is not None:  # cast straight from the mapped file: one pass over the bytes
            chunk.copy_(mapped)
            del mapped
            shard.unmap(p.ref)
        else:
            raw = scratch.view(p.ref.shape, p.ref.dtype)
            ckpt.read_into(p, raw)
            chunk.copy_(raw)
        yield chunk, buffer


# --------------------------------------------------------------------------------------------------
# Writing safetensors without holding the model in memory
# --------------------------------------------------------------------------------------------------


def parse_size(size: int | str) -> int:
    """Bytes in ``5GB``, ``500MB``, ``2GiB``, ``100KB`` or a plain integer (decimal units, as transformers)."""
    if isinstance(size, int):
        if size < 1:
            raise CheckpointError(f"max shard size must be positive, got {size}")
        return size
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(I?)B?\s*", size.upper())
    if not m:
        raise CheckpointError(f"cannot read the size {size!r}; use e.g. 5GB, 500MB or a number of bytes")
    value = float(m.group(1)) * (1024 if m.group(3) else 1000) ** " KMGT".index(m.group(2) or " ")
    if value < 1:
        raise CheckpointError(f"max shard size must be positive, got {size!r}")
    return int(value)


def _shard_outputs(outputs: list[_Output], max_bytes: int) -> list[list[_Output]]:
    shards: list[list[_Output]] = [[]]
    size = 0
    for out in outputs:
        if shards[-1] and size + out.nbytes > max_bytes:
            shards.append([])
            size = 0
        shards[-1].append(out)
        size += out.nbytes
    return shards


def _safetensors_header(outputs: Sequence[_Output]) -> tuple[bytes, list[_Output]]:
    """Header bytes and the data order (descending element size, then name, as safetensors does)."""
    order = sorted(outputs, key=lambda o: (-o.dtype.itemsize, o.name))
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for o in order:
        if o.dtype not in _SAFETENSORS_DTYPES:
            raise CheckpointError(f"{o.name}: dtype {o.dtype} cannot be stored in safetensors")
        header[o.name] = {
            "dtype": _SAFETENSORS_DTYPES[o.dtype],
            "shape": list(o.shape),
            "data_offsets": [offset, offset + o.nbytes],
        }
        offset += o.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw, order


def _write_all(fd: int, buf: memoryview) -> None:
    done = 0
    while done < len(buf):
        done += os.write(fd, buf[done : done + _IO_CHUNK])


class _Failed:
    def __init__(self, error: BaseException) -> None:
        self.error = error


_TENSOR_DONE = object()


def _write_files(ckpt: _Checkpoint, files: list[tuple[Path, list[_Output]]], on_tensor: Callable[[], None]) -> int:
    """Write safetensors files; a reader thread prepares the next chunks while this thread writes.

    Reads (``preadv``), casts and writes all release the GIL, so they overlap. Two chunk buffers
    circulate between the threads, which bounds the memory in flight.
    """
    jobs = [(path, *_safetensors_header(outs)) for path, outs in files]
    free: queue.Queue[_Buffer] = queue.Queue()
    for _ in range(2):
        free.put(_Buffer())
    ready: queue.Queue[Any] = queue.Queue(maxsize=2)
    stop = threading.Event()

    def wait(action: Callable[[], Any]) -> Any:
        while not stop.is_set():
            try:
                return action()
            except (queue.Empty, queue.Full):
                continue
        raise _Stopped

    def take() -> _Buffer:
        return wait(lambda: free.get(timeout=0.1))

    def reader() -> None:
        scratch = _Buffer()
        try:
            for _, _, order in jobs:
                for out in order:
                    for item in _produce(ckpt, out, take, scratch):
                        wait(lambda item=item: ready.put(item, timeout=0.1))
                    wait(lambda: ready.put(_TENSOR_DONE, timeout=0.1))
        except _Stopped:
            pass
        except BaseException as err:  # noqa: BLE001 - handed to the writer, which re-raises it
            failure = _Failed(err)
            try:
                wait(lambda: ready.put(failure, timeout=0.1))
            except _Stopped:
                pass

    thread = threading.Thread(target=reader, name="rg_verl-convert-reader", daemon=True)
    thread.start()
    written = 0
    try:
        for path, header, order in jobs:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                _write_all(fd, memoryview(header))
                written += len(header)
                for out in order:
                    nbytes = 0
                    while (item := ready.get()) is not _TENSOR_DONE:
                        if isinstance(item, _Failed):
                            raise item.error
                        chunk, buffer = item
                        if chunk.dtype != out.dtype:
                            raise CheckpointError(f"{out.name}: produced {chunk.dtype}, planned {out.dtype}")
                        if isinstance(chunk, _Span):
                            chunk.file.copy_to(chunk.ref, fd)
                            nbytes += chunk.ref.numel * chunk.ref.dtype.itemsize
                        else:
                            if chunk.numel():
                                _write_all(fd, _byte_view(chunk))
                            nbytes += chunk.numel() * chunk.element_size()
                        if buffer is not None:
                            free.put(buffer)
                    if nbytes != out.nbytes:
                        raise CheckpointError(f"{out.name}: produced {nbytes} bytes, planned {out.nbytes}")
                    written += nbytes
                    on_tensor()
                os.fsync(fd)
            finally:
                os.close(fd)
    finally:
        stop.set()
        thread.join()
    return written


class _Stopped(Exception):
    pass


def _progress(total: int, enabled: bool, desc: str):
    if enabled:
        try:
            from tqdm.auto import tqdm

            return tqdm(total=total, desc=desc, unit="tensor", dynamic_ncols=True)
        except ImportError:
            pass

    class _Null:
        def update(self, n: int = 1) -> None:
            pass

        def close(self) -> None:
            pass

    return _Null()


# --------------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------------


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
    _check_target(out, force)
    hf = Path(hf_dir).expanduser().resolve() if hf_dir is not None else info.hf_dir

    with _Checkpoint(info) as ckpt:
        plan = _plan(ckpt, hf, DTYPES[dtype], merge_lora, lora_alpha)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
        try:
            files, written = _write_model(ckpt, plan, tmp, max_bytes, progress)
            if verify:
                _check_against_config(plan, trust_remote_code)
                _verify(ckpt, plan, tmp, progress)
            _publish(tmp, out, force)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    everything = plan.outputs + plan.adapter
    return ConversionResult(
        out_dir=out,
        world_size=info.world_size,
        fsdp_version=info.fsdp_version,
        num_tensors=len(everything),
        num_parameters=sum(math.prod(o.shape) for o in everything),
        dtype=plan.dtype_name,
        bytes_written=written,
        weight_files=tuple(files),
        lora=plan.lora_mode,
        verified=verify,
        seconds=time.perf_counter() - start,
    )


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
    with _Checkpoint(info) as ckpt:
        plan = _plan(ckpt, hf, None, not (out / ADAPTER_DIR).is_dir(), lora_alpha)
        written = _read_output_dtypes(out)
        for o in plan.outputs:
            if o.name in written and o.dtype.is_floating_point:
                o.dtype = written[o.name]
        _check_against_config(plan, trust_remote_code)
        _verify(ckpt, plan, out, progress)


# --------------------------------------------------------------------------------------------------
# Conversion steps
# --------------------------------------------------------------------------------------------------


def _check_target(out: Path, force: bool) -> None:
    if out.exists() and not force and (not out.is_dir() or any(out.iterdir())):
        raise OutputExistsError(f"{out} already exists; pass force=True (CLI: --force) to replace it")


def _write_model(ckpt: _Checkpoint, plan: _Plan, folder: Path, max_bytes: int, progress: bool) -> tuple[list[str], int]:
    shards = _shard_outputs(plan.outputs, max_bytes)
    names = (
        ["model.safetensors"]
        if len(shards) == 1
        else [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
    )
    files = [(folder / name, shard) for name, shard in zip(names, shards, strict=True)]
    if plan.adapter:
        (folder / ADAPTER_DIR).mkdir()
        files.append((folder / ADAPTER_DIR / "adapter_model.safetensors", plan.adapter))
        (folder / ADAPTER_DIR / "adapter_config.json").write_text(json.dumps(plan.adapter_config, indent=2) + "\n")
    bar = _progress(len(plan.outputs) + len(plan.adapter), progress, "Converting")
    try:
        written = _write_files(ckpt, files, bar.update)
    finally:
        bar.close()
    if len(shards) > 1:
        index = {
            "metadata": {
                "total_parameters": sum(math.prod(o.shape) for o in plan.outputs),
                "total_size": sum(o.nbytes for o in plan.outputs),
            },
            "weight_map": dict(sorted((o.name, n) for n, shard in zip(names, shards, strict=True) for o in shard)),
        }
        (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    _copy_hf_files(plan, folder)
    return names, written


def _copy_hf_files(plan: _Plan, folder: Path) -> None:
    """Config (with the output dtype), generation config, tokenizer and any custom code of ``hf_dir``."""
    for f in sorted(plan.hf_dir.iterdir()):
        if f.is_file() and not _WEIGHT_FILE.search(f.name) and f.name != "config.json":
            shutil.copy2(f, folder / f.name)
    config = json.loads(json.dumps(plan.config))  # a deep copy
    for key in ("dtype", "torch_dtype"):
        if key in config:
            config[key] = plan.dtype_name
    config.setdefault("dtype", plan.dtype_name)
    if plan.untie:
        for cfg in (config, config.get("text_config") or {}):
            if "tie_word_embeddings" in cfg:
                cfg["tie_word_embeddings"] = False
    (folder / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def _publish(tmp: Path, out: Path, force: bool) -> None:
    mode = 0o777 & ~_umask()
    for f in [tmp, *tmp.rglob("*")]:
        f.chmod(mode if f.is_dir() else mode & 0o666)
    old = None
    if out.exists() or out.is_symlink():
        if out.is_dir() and not out.is_symlink() and not any(out.iterdir()):
            out.rmdir()
        elif force:
            old = out.parent / f".{out.name}.old-{os.getpid()}-{time.monotonic_ns()}"
            os.rename(out, old)
        else:
            raise OutputExistsError(f"{out} appeared while converting; pass force=True to replace it")
    try:
        os.rename(tmp, out)
    except OSError as err:
        if old is not None:
            os.rename(old, out)
        raise OutputExistsError(f"could not move the converted model into {out}: {err}") from err
    if old is not None:
        shutil.rmtree(old) if old.is_dir() and not old.is_symlink() else old.unlink()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _read_output_dtypes(folder: Path) -> dict[str, torch.dtype]:
    from safetensors import safe_open

    names = {v: k for k, v in _SAFETENSORS_DTYPES.items()}
    dtypes = {}
    for f in sorted(folder.glob("*.safetensors")):
        with safe_open(f, "pt") as st:
            for k in st.keys():
                dtypes[k] = names.get(st.get_slice(k).get_dtype())
    return dtypes


def _verify(ckpt: _Checkpoint, plan: _Plan, folder: Path, progress: bool) -> None:
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
    bar = _progress(len(plan.outputs) + len(plan.adapter), progress, "Verifying")
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


def _verify_tensor(ckpt: _Checkpoint, out: _Output, written: torch.Tensor, path: Path) -> None:
    if tuple(written.shape) != out.shape or written.dtype != out.dtype:
        raise CheckpointError(
            f"{path}: {out.name} is {list(written.shape)} {written.dtype}, expected {list(out.shape)} {out.dtype}"
        )
    if out.lora is not None:
        if not _bits_equal(_materialize(ckpt, out), written):
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
            if tuple(view.shape) != tuple(piece.shape) or not _bits_equal(piece.to(written.dtype), view):
                raise CheckpointError(
                    f"{path}: {out.name} differs from rank {p.rank}'s shard in {ckpt.files[p.rank].path} ({src.key})"
                )


def _bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.numel() == 0:
        return True
    return torch.equal(a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8))
