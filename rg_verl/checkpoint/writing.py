"""Writing safetensors without holding the model in memory.

Output tensors stream piece by piece (:func:`_produce`), a reader thread prepares the next piece while the
main thread writes, weights are split into indexed shards, the ``huggingface/`` files are copied, and the
result is built in a temporary folder that is renamed into place (:func:`staging`, over
:func:`rg_verl.common.atomic.staging_dir`).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import queue
import re
import shutil
import struct
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rg_verl.common.atomic import PublishError, staging_dir

from .assembly import Checkpoint, assemble, bits_equal
from .errors import CheckpointError, OutputExistsError
from .lora import ADAPTER_DIR
from .plan import Output, Plan
from .reading import IO_CHUNK, ShardFile, byte_view
from .unpickler import TensorRef

# files of huggingface/ that are weights, not config: never copied next to the converted weights
_WEIGHT_FILE = re.compile(r"(\.safetensors|\.safetensors\.index\.json|\.bin|\.bin\.index\.json|\.pt|\.pth|\.ckpt)$")


SAFETENSORS_DTYPES = {
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


def materialize(ckpt: Checkpoint, out: Output) -> torch.Tensor:
    """The whole output tensor in its output dtype: assembled, LoRA merged in fp32, cast."""
    full = assemble(ckpt, out.base)
    for tied in out.tied:
        if tied.unique_pieces() != out.base.unique_pieces() and not bits_equal(assemble(ckpt, tied), full):
            raise CheckpointError(
                f"{tied.key} is tied to {out.name} in the config, but the checkpoint holds different values for "
                f"them (files {tied.describe_files()})"
            )
    if out.lora is not None:
        a = assemble(ckpt, out.lora.a).float()
        b = assemble(ckpt, out.lora.b).float()
        delta = (b @ a).T if out.lora.embedding else b @ a
        full = full.float().add_(delta, alpha=out.lora.scale)
    return full.to(out.dtype).contiguous()


@dataclass(frozen=True)
class _Span:
    """Bytes to copy unchanged from a shard file into the output."""

    file: ShardFile
    ref: TensorRef

    @property
    def dtype(self) -> torch.dtype:
        return self.ref.dtype

    @property
    def nbytes(self) -> int:
        return self.ref.numel * self.ref.dtype.itemsize


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
    ckpt: Checkpoint, out: Output, take: Callable[[], _Buffer], scratch: _Buffer
) -> Iterator[tuple[torch.Tensor | _Span, _Buffer | None]]:
    """The output tensor's bytes, in order, as (chunk, buffer to give back once written) pairs.

    Tensors split along dim 0 (what FSDP does by default) stream piece by piece: copied file to file when
    the dtype stays, else read and cast into reused buffers. Everything else (other dims, LoRA merges,
    tied copies to compare) is assembled whole.
    """
    pieces = out.base.unique_pieces()
    slabs = all(all(o == 0 for o in p.offsets[1:]) and p.ref.shape[1:] == out.shape[1:] for p in pieces)
    if out.lora is not None or any(t.unique_pieces() != pieces for t in out.tied) or not slabs:
        yield materialize(ckpt, out), None
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
    """Bytes in ``5GB``, ``500MB``, ``2GiB``, ``100KB`` or a plain integer (decimal units, as transformers).

    >>> parse_size("5GB"), parse_size("2GiB"), parse_size(1024)
    (5000000000, 2147483648, 1024)
    """
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


def _shard_outputs(outputs: list[Output], max_bytes: int) -> list[list[Output]]:
    shards: list[list[Output]] = [[]]
    size = 0
    for out in outputs:
        if shards[-1] and size + out.nbytes > max_bytes:
            shards.append([])
            size = 0
        shards[-1].append(out)
        size += out.nbytes
    return shards


def _safetensors_header(outputs: Sequence[Output]) -> tuple[bytes, list[Output]]:
    """Header bytes and the data order (descending element size, then name, as safetensors does)."""
    order = sorted(outputs, key=lambda o: (-o.dtype.itemsize, o.name))
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for o in order:
        if o.dtype not in SAFETENSORS_DTYPES:
            raise CheckpointError(f"{o.name}: dtype {o.dtype} cannot be stored in safetensors")
        header[o.name] = {
            "dtype": SAFETENSORS_DTYPES[o.dtype],
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
        done += os.write(fd, buf[done : done + IO_CHUNK])


class _Failed:
    def __init__(self, error: BaseException) -> None:
        self.error = error


class _Stopped(Exception):
    pass


_TENSOR_DONE = object()


class _Reader:
    """The thread that prepares the outputs' chunks, in order, while the writer writes the ones before.

    Reads (``preadv``), casts and writes all release the GIL, so they overlap. Two chunk buffers
    circulate between the threads, which bounds the memory in flight. The reader's error reaches the
    writer through :meth:`chunks`; leaving the ``with`` block stops the thread.
    """

    def __init__(self, ckpt: Checkpoint, outputs: list[Output]) -> None:
        self.ckpt, self.outputs = ckpt, outputs
        self.free: queue.Queue[_Buffer] = queue.Queue()
        for _ in range(2):
            self.free.put(_Buffer())
        self.ready: queue.Queue[Any] = queue.Queue(maxsize=2)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="rg_verl-convert-reader", daemon=True)

    def __enter__(self) -> _Reader:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()

    def chunks(self) -> Iterator[torch.Tensor | _Span]:
        """The next output's chunks; each chunk's buffer goes back to the reader once the next is asked for."""
        while (item := self.ready.get()) is not _TENSOR_DONE:
            if isinstance(item, _Failed):
                raise item.error
            chunk, buffer = item
            yield chunk
            if buffer is not None:
                self.free.put(buffer)

    def _wait(self, action: Callable[[], Any]) -> Any:
        """``action()`` retried until it neither times out nor the writer has stopped."""
        while not self.stop.is_set():
            try:
                return action()
            except (queue.Empty, queue.Full):
                continue
        raise _Stopped

    def _take(self) -> _Buffer:
        return self._wait(lambda: self.free.get(timeout=0.1))

    def _put(self, item: Any) -> None:
        self._wait(lambda: self.ready.put(item, timeout=0.1))

    def _run(self) -> None:
        scratch = _Buffer()
        try:
            for out in self.outputs:
                for item in _produce(self.ckpt, out, self._take, scratch):
                    self._put(item)
                self._put(_TENSOR_DONE)
        except _Stopped:
            pass
        except BaseException as err:  # noqa: BLE001 - handed to the writer, which re-raises it
            with contextlib.suppress(_Stopped):
                self._put(_Failed(err))


def _write_files(ckpt: Checkpoint, files: list[tuple[Path, list[Output]]], on_tensor: Callable[[], None]) -> int:
    """Write safetensors files, each output's chunks as the reader thread prepares them; returns the bytes written."""
    jobs = [(path, *_safetensors_header(outs)) for path, outs in files]
    written = 0
    with _Reader(ckpt, [out for _, _, order in jobs for out in order]) as reader:
        for path, header, order in jobs:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                _write_all(fd, memoryview(header))
                written += len(header)
                for out in order:
                    written += _write_tensor(fd, out, reader.chunks())
                    on_tensor()
                os.fsync(fd)
            finally:
                os.close(fd)
    return written


def _write_tensor(fd: int, out: Output, chunks: Iterator[torch.Tensor | _Span]) -> int:
    """Append one output tensor's chunks to ``fd``, checked against the plan; returns its byte count."""
    nbytes = 0
    for chunk in chunks:
        if chunk.dtype != out.dtype:
            raise CheckpointError(f"{out.name}: produced {chunk.dtype}, planned {out.dtype}")
        if isinstance(chunk, _Span):
            chunk.file.copy_to(chunk.ref, fd)
            nbytes += chunk.nbytes
        else:
            if chunk.numel():
                _write_all(fd, byte_view(chunk))
            nbytes += chunk.numel() * chunk.element_size()
    if nbytes != out.nbytes:
        raise CheckpointError(f"{out.name}: produced {nbytes} bytes, planned {out.nbytes}")
    return nbytes


def progress_bar(total: int, enabled: bool, desc: str) -> Any:
    """A tqdm bar over ``total`` tensors; one that shows nothing when not ``enabled`` or without tqdm."""
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


def check_target(out: Path, force: bool) -> None:
    """Refuse early, before any reading, an ``out`` that exists and may not be replaced."""
    if out.exists() and not force and (not out.is_dir() or any(out.iterdir())):
        raise OutputExistsError(f"{out} already exists; pass force=True (CLI: --force) to replace it")


def write_model(ckpt: Checkpoint, plan: Plan, folder: Path, max_bytes: int, progress: bool) -> tuple[list[str], int]:
    """Write the planned model into ``folder`` as ``save_pretrained`` would; returns weight file names and bytes."""
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
    bar = progress_bar(len(plan.outputs) + len(plan.adapter), progress, "Converting")
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


def _copy_hf_files(plan: Plan, folder: Path) -> None:
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


@contextlib.contextmanager
def staging(out: Path, force: bool) -> Iterator[Path]:
    """A temporary folder beside ``out``, renamed to ``out`` when the block ends without an error.

    :func:`rg_verl.common.atomic.staging_dir` with ``replace=force``: an empty ``out`` is replaced, a non-empty
    one only with ``force`` (moved aside, restored if the rename fails). On an error nothing is left
    behind. A folder that appeared meanwhile is an :class:`OutputExistsError`, as the CLI reports it.
    """
    try:
        with staging_dir(out, replace=force) as tmp:
            yield tmp
    except PublishError as err:
        hint = "; pass force=True (CLI: --force) to replace it" if not force and out.exists() else ""
        raise OutputExistsError(f"{err}{hint}") from err
