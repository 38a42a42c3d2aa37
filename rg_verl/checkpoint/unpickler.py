"""The restricted unpickler: a ``torch.save`` state dict as plain records, running nothing from the pickle.

DTensors and ShardedTensors become :class:`Wrapper` objects, device meshes, placements and shard metadata
become :class:`Record` objects, and tensors become :class:`TensorRef` s: where their bytes lie in the
file's zip records, read later by :class:`~rg_verl.checkpoint.reading.ShardFile`.
"""

from __future__ import annotations

import collections
import io
import math
import pickle
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

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


@dataclass(frozen=True)
class StorageRef:
    """A storage record of a shard file: its key under ``data/``, element dtype and element count."""

    path: Path
    key: str
    dtype: torch.dtype
    numel: int


@dataclass(frozen=True)
class TensorRef:
    """Where one saved tensor's data lies: a view (offset, shape, stride) of a storage record."""

    storage: StorageRef
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
class Wrapper:
    """A tensor subclass instance (DTensor, ShardedTensor) seen through its pickle."""

    cls: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    state: Any = None


class Record:
    """Stand-in for a class the converter must not import (DeviceMesh, placements, shard metadata...)."""

    qualname = "?"

    def __new__(cls, *args: Any, **kwargs: Any) -> Record:
        obj = object.__new__(cls)
        obj.args, obj.kwargs, obj.attrs = args, kwargs, {}
        return obj

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        self.attrs.update(attrs_of(state))

    def get(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    @property
    def name(self) -> str:
        return self.qualname.rsplit(".", 1)[-1]

    def __repr__(self) -> str:
        return f"<{self.qualname} args={self.args} attrs={sorted(self.attrs)}>"


def attrs_of(state: Any) -> dict:
    """The attribute dict of a pickled object's state: a dict, or a (dict, slots) pair.

    >>> attrs_of(({"a": 1}, {"b": 2})), attrs_of(None)
    ({'a': 1, 'b': 2}, {})
    """
    if isinstance(state, dict):
        return state
    if isinstance(state, tuple) and len(state) == 2 and all(s is None or isinstance(s, dict) for s in state):
        return {**(state[0] or {}), **(state[1] or {})}
    return {}


_RECORD_TYPES: dict[str, type[Record]] = {}


def _record_type(qualname: str) -> type[Record]:
    if qualname not in _RECORD_TYPES:
        _RECORD_TYPES[qualname] = type(qualname.rsplit(".", 1)[-1], (Record,), {"qualname": qualname})
    return _RECORD_TYPES[qualname]


class _TensorMarker:
    """What the pickle names as ``torch.Tensor`` / ``torch.nn.Parameter`` (never instantiated)."""


def _rebuild_tensor(storage: StorageRef, offset: int, size: Sequence[int], stride: Sequence[int], *_: Any):
    return TensorRef(storage, int(offset), tuple(int(s) for s in size), tuple(int(s) for s in stride))


def _rebuild_parameter(data: Any, *_: Any) -> Any:
    return data


def _rebuild_wrapper_subclass(cls: Any, dtype: torch.dtype, size: Sequence[int], *_: Any) -> Wrapper:
    name = getattr(cls, "qualname", getattr(cls, "__qualname__", str(cls)))
    return Wrapper(name, dtype, tuple(int(s) for s in size))


def _rebuild_from_type(func: Callable, new_type: Any, args: tuple, state: Any = None) -> Any:
    ret = func(*args)
    if isinstance(ret, Wrapper):
        ret.state = state
    return ret


def _safe_getattr(obj: Any, name: str) -> Any:
    # pickles spell enum members and nested classes as getattr(Class, "NAME"); only allow that on records.
    # A record type serves for both: nothing reads enum members' values.
    if isinstance(obj, type) and issubclass(obj, Record):
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


class SafeUnpickler(pickle.Unpickler):
    """Unpickles a torch state dict into TensorRef / Wrapper / Record objects; runs nothing else."""

    def __init__(self, data: bytes, path: Path) -> None:
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

    def persistent_load(self, pid: Any) -> StorageRef:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise pickle.UnpicklingError(f"unexpected persistent id {pid!r}")
        _, storage_type, key, _location, numel = pid
        dtype = storage_type if isinstance(storage_type, torch.dtype) else torch.uint8
        return StorageRef(self.path, str(key), dtype, int(numel))
