"""Atomic outputs: a reader sees the old file (or folder) or the new one, never half; permissions follow the umask."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = ["PublishError", "publish_dir", "staging_dir", "write_atomic"]


class PublishError(FileExistsError):
    """The destination of a folder exists (or appeared) and may not be replaced."""


def _umask() -> int:
    """The process umask, from /proc where it can be (``os.umask`` reads it only by setting it, racing threads)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o077)  # the strictest mask while it is read
    os.umask(mask)
    return mask


def _chmod_as_created(path: Path) -> None:
    """Give ``path`` (and what it holds) the permissions ``mkdir`` / ``open`` would (``mkstemp`` leaves 0600)."""
    mode = 0o777 & ~_umask()
    for item in [path, *path.rglob("*")] if path.is_dir() else [path]:
        if not item.is_symlink():
            item.chmod(mode if item.is_dir() else mode & 0o666)


def write_atomic(path: str | os.PathLike, data: str | bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder, fsync'd, then renamed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        _chmod_as_created(Path(tmp))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def publish_dir(staging: Path, out: Path, replace: bool = False) -> None:
    """Move the finished folder ``staging`` to ``out`` in one rename; a non-empty ``out`` only with ``replace``."""
    _chmod_as_created(staging)
    old = None
    if out.exists() or out.is_symlink():
        if out.is_dir() and not out.is_symlink() and not any(out.iterdir()):
            out.rmdir()
        elif replace:
            old = out.parent / f".{out.name}.old-{os.getpid()}-{time.monotonic_ns()}"
            os.rename(out, old)
        else:
            raise PublishError(f"{out} exists and is not empty (it may have appeared while writing)")
    try:
        os.rename(staging, out)
    except OSError as err:
        if old is not None:
            os.rename(old, out)
        raise PublishError(f"could not move the finished output into {out}: {err}") from err
    if old is not None:
        shutil.rmtree(old) if old.is_dir() and not old.is_symlink() else old.unlink()


@contextlib.contextmanager
def staging_dir(out: str | os.PathLike, replace: bool = False) -> Iterator[Path]:
    """A hidden folder beside ``out`` to write into; published as ``out`` when the block ends without error.

    >>> import tempfile, pathlib
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> with staging_dir(root / "model") as tmp:
    ...     _ = (tmp / "config.json").write_text("{}")
    >>> sorted(p.name for p in root.iterdir()), (root / "model" / "config.json").read_text()
    (['model'], '{}')
    """
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        yield tmp
        publish_dir(tmp, out, replace=replace)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
