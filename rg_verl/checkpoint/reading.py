"""Reading verl's ``torch.save`` shard files without running their pickles.

A restricted unpickler turns DTensors, device meshes and sharded tensors into plain records; tensor data is
read straight from the zip records (``pread``, ``mmap``, file-to-file copies). :func:`inspect_checkpoint`
describes an actor folder from its file names and ``fsdp_config.json``.
"""

from __future__ import annotations

import collections
import json
import math
import mmap
import os
import pickle
import re
import struct
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .errors import CheckpointError

_MODEL_FILE = re.compile(r"^model_world_size_(\d+)_rank_(\d+)\.pt$")


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
