"""Writing safetensors without holding the model in memory.

Output tensors stream piece by piece (:func:`_produce`), a reader thread prepares the next piece while the
main thread writes, weights are split into indexed shards, the ``huggingface/`` files are copied, and the
result is built in a temporary folder that is renamed into place (:func:`_publish`).
"""

from __future__ import annotations

import json
import math
import os
import queue
import re
import shutil
import struct
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .assembly import _assemble, _bits_equal, _Checkpoint
from .errors import CheckpointError, OutputExistsError
from .lora import ADAPTER_DIR
from .plan import _Output, _Plan
from .reading import _IO_CHUNK, _byte_view, _ShardFile, _TensorRef

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
