"""Reading verl's shard files and actor folders.

:class:`ShardFile` opens one ``model_world_size_W_rank_r.pt``: its state dict through the restricted
unpickler (:mod:`.unpickler`), its tensor data straight from the zip records (``pread``, ``mmap``,
file-to-file copies). :func:`inspect_checkpoint` describes an actor folder from its file names and
``fsdp_config.json``.
"""

from __future__ import annotations

import json
import mmap
import os
import pickle
import re
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .errors import CheckpointError
from .unpickler import SafeUnpickler, StorageRef, TensorRef

_MODEL_FILE = re.compile(r"^model_world_size_(\d+)_rank_(\d+)\.pt$")

IO_CHUNK = 1 << 30  # bytes per read/write system call


def read_json(path: Path) -> Any:
    """The JSON in ``path``; a file that cannot be read or parsed is a :class:`CheckpointError` naming it."""
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{path}: unreadable ({err})") from err


class ShardFile:
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
            self.state = SafeUnpickler(self.zip.read(pkl), path).load()
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

    def _extent(self, storage: StorageRef) -> tuple[int, int]:
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
            n = os.preadv(self._fd, [buf[done : done + IO_CHUNK]], pos + done)
            if n <= 0:
                raise CheckpointError(f"{self.path}: unexpected end of file; the file is truncated")
            done += n

    def _bytes_of(self, ref: TensorRef) -> tuple[int, int]:
        """File positions of the first and one-past-last byte that the view ``ref`` touches."""
        start, size = self._extent(ref.storage)
        lo, hi = ref.span()
        item = ref.dtype.itemsize
        if lo < 0 or hi * item > size:
            raise CheckpointError(f"{self.path}: a tensor view reaches past its storage; the file is corrupt")
        return start + lo * item, start + hi * item

    def read_into(self, ref: TensorRef, out: torch.Tensor) -> None:
        """Fill ``out`` (contiguous, ``ref``'s shape and dtype) with the tensor ``ref`` names."""
        if ref.numel == 0:
            return
        pos, end = self._bytes_of(ref)
        if ref.is_contiguous() and out.is_contiguous():
            self._pread_into(byte_view(out), pos)
        else:
            flat = torch.empty((end - pos) // ref.dtype.itemsize, dtype=ref.dtype)
            self._pread_into(byte_view(flat), pos)
            out.copy_(flat.as_strided(ref.shape, ref.stride, 0))

    def read(self, ref: TensorRef) -> torch.Tensor:
        out = torch.empty(ref.shape, dtype=ref.dtype)
        self.read_into(ref, out)
        return out

    def mapped(self, ref: TensorRef) -> torch.Tensor | None:
        """The contiguous tensor ``ref`` as a view of the file mapped into memory (nothing is read yet).

        None when its bytes are not aligned to its element size (torch.save aligns them; other writers may not).
        """
        if not ref.is_contiguous():
            raise ValueError("mapped() serves contiguous tensors only")
        pos, end = self._bytes_of(ref)
        if pos % ref.dtype.itemsize:
            return None
        if self._mapped is None:
            self._map = mmap.mmap(self._fd, 0, access=mmap.ACCESS_COPY)  # private: never writes the file
            self._mapped = torch.frombuffer(self._map, dtype=torch.uint8)
        return self._mapped[pos:end].view(ref.dtype).view(ref.shape)

    def unmap(self, ref: TensorRef) -> None:
        """Drop the pages of ``ref`` from this process (they stay in the page cache)."""
        if self._map is not None and hasattr(self._map, "madvise"):
            pos, end = self._bytes_of(ref)
            lo, hi = pos // mmap.PAGESIZE * mmap.PAGESIZE, min(end, self._size)
            if hi > lo:
                self._map.madvise(mmap.MADV_DONTNEED, lo, hi - lo)

    def copy_to(self, ref: TensorRef, fd: int) -> None:
        """Append the bytes of the contiguous tensor ``ref`` to the file ``fd``, copied inside the kernel."""
        pos, end = self._bytes_of(ref)
        copy = getattr(os, "copy_file_range", None)
        while pos < end:
            count = min(end - pos, IO_CHUNK)
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


def byte_view(t: torch.Tensor) -> memoryview:
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
        if m := _MODEL_FILE.match(f.name):
            found.setdefault(int(m.group(1)), {})[int(m.group(2))] = f
    config_path = actor / "fsdp_config.json"
    fsdp_config = read_json(config_path) if config_path.is_file() else {}
    if not isinstance(fsdp_config, dict):
        raise CheckpointError(f"{config_path}: holds a JSON {type(fsdp_config).__name__}, not an object")
    world_size = _world_size(actor, found, fsdp_config.get("world_size"))
    expected = [actor / f"model_world_size_{world_size}_rank_{r}.pt" for r in range(world_size)]
    missing = [str(p) for r, p in enumerate(expected) if r not in found.get(world_size, {})]
    if missing:
        raise CheckpointError(f"missing model shard(s) of a {world_size}-rank checkpoint: {', '.join(missing)}")
    meta_path, hf_dir = actor / "lora_train_meta.json", actor / "huggingface"
    return CheckpointInfo(
        actor,
        world_size,
        fsdp_config.get("FSDP_version"),
        expected,
        hf_dir if hf_dir.is_dir() else None,
        read_json(meta_path) if meta_path.is_file() else None,
    )


def _world_size(actor: Path, found: dict[int, dict[int, Path]], saved: Any) -> int:
    """The world size ``fsdp_config.json`` names (``saved``), checked against the shard files ``found``."""
    config_path = actor / "fsdp_config.json"
    if saved is not None and (not isinstance(saved, int) or saved < 1):
        raise CheckpointError(f"{config_path}: world_size must be a positive integer, got {saved!r}")
    if saved is None:
        if not found:
            hint = " (is this the global_step_N folder? pass its actor/ subfolder)"
            hint = hint if (actor / "actor").is_dir() else ""
            raise CheckpointError(f"{actor}: no model_world_size_*_rank_*.pt files{hint}")
        if len(found) > 1:
            raise CheckpointError(
                f"{actor}: model shards for several world sizes {sorted(found)} and no fsdp_config.json to choose"
            )
        return next(iter(found))
    if found and saved not in found:
        raise CheckpointError(
            f"{config_path} says world_size={saved} but the shards are for world size {sorted(found)}"
        )
    return int(saved)
