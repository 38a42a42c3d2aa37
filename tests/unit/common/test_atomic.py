"""Tests for rg_verl.common.atomic: a reader sees the old output or the new one, never half of one or a leftover."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rg_verl.common import atomic
from rg_verl.common.atomic import PublishError, publish_dir, staging_dir, write_atomic


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def _tree(root: Path) -> dict[str, str]:
    """Every file under ``root`` (relative path -> text): what a reader of the folder sees."""
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


def _folder(path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    return path


@pytest.fixture
def umask() -> Iterator:
    """Set the process umask for one test; the old one is restored after."""
    old = os.umask(0o022)
    os.umask(old)
    yield os.umask
    os.umask(old)


# ---- write_atomic


@given(data=st.one_of(st.binary(max_size=256), st.text(max_size=64)))
def test_write_atomic_writes_exactly_the_data_and_nothing_else(tmp_path_factory, data):
    folder = tmp_path_factory.mktemp("w")
    write_atomic(folder / "out", data)
    assert (folder / "out").read_bytes() == (data.encode() if isinstance(data, str) else data)
    assert [p.name for p in folder.iterdir()] == ["out"]


def test_write_atomic_replaces_a_file_and_creates_missing_folders(tmp_path):
    target = tmp_path / "a" / "b" / "out.json"
    write_atomic(target, "old")
    write_atomic(target, b"new")
    assert target.read_text() == "new"
    assert [p.name for p in target.parent.iterdir()] == ["out.json"]


@pytest.mark.parametrize("failing", ["fsync", "replace"])
def test_write_atomic_error_mid_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch, failing):
    target = tmp_path / "out.txt"
    target.write_text("old")

    def fail(*args):
        raise OSError(f"{failing} failed")

    monkeypatch.setattr(atomic.os, failing, fail)
    with pytest.raises(OSError, match=f"{failing} failed"):
        write_atomic(target, "new")
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"] and target.read_text() == "old"


def test_write_atomic_interrupt_leaves_no_temporary(tmp_path, monkeypatch):
    """Not only Exceptions: a KeyboardInterrupt during the write cleans up too."""

    def interrupt(fd):
        raise KeyboardInterrupt

    monkeypatch.setattr(atomic.os, "fsync", interrupt)
    with pytest.raises(KeyboardInterrupt):
        write_atomic(tmp_path / "out", "x")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002])
def test_write_atomic_permissions_follow_the_umask(tmp_path, umask, mask):
    umask(mask)
    write_atomic(tmp_path / "atomic", "x")
    (tmp_path / "plain").write_text("x")  # what open() gives under the same mask
    assert _mode(tmp_path / "atomic") == _mode(tmp_path / "plain") == 0o666 & ~mask


@pytest.mark.parametrize("proc", [True, False], ids=["proc", "no-proc"])
def test_the_umask_is_read_without_changing_it(umask, monkeypatch, proc):
    if not proc:  # a system without /proc: the mask is read by setting it, then put back

        class NoProc:
            def __init__(self, *args):
                pass

            def read_text(self):
                raise OSError("no /proc")

        monkeypatch.setattr(atomic, "Path", NoProc)
    umask(0o027)
    assert atomic._umask() == 0o027
    assert umask(0o027) == 0o027  # still the mask set above


# ---- publish_dir


def test_publish_dir_into_a_missing_or_empty_destination(tmp_path):
    for out in (tmp_path / "missing", tmp_path / "empty"):
        if out.name == "empty":
            out.mkdir()
        staging = _folder(tmp_path / f"staging-{out.name}", {"a.txt": "new", "sub/b.txt": "deep"})
        publish_dir(staging, out)
        assert _tree(out) == {"a.txt": "new", "sub/b.txt": "deep"} and not staging.exists()


@pytest.mark.parametrize("kind", ["folder", "file"])
def test_publish_dir_refuses_a_non_empty_destination_without_replace(tmp_path, kind):
    out = tmp_path / "out"
    if kind == "folder":
        _folder(out, {"keep.txt": "old"})
    else:
        out.write_text("old file")
    staging = _folder(tmp_path / "staging", {"a.txt": "new"})
    with pytest.raises(PublishError, match="exists and is not empty") as raised:
        publish_dir(staging, out)
    assert isinstance(raised.value, FileExistsError)  # callers that catch FileExistsError see it too
    assert (_tree(out) == {"keep.txt": "old"}) if kind == "folder" else (out.read_text() == "old file")
    assert _tree(staging) == {"a.txt": "new"}


@pytest.mark.parametrize("kind", ["folder", "file"])
def test_publish_dir_with_replace_replaces_and_removes_the_old_one(tmp_path, kind):
    out = tmp_path / "out"
    if kind == "folder":
        _folder(out, {"keep.txt": "old", "sub/x": "old"})
    else:
        out.write_text("old file")
    publish_dir(_folder(tmp_path / "staging", {"a.txt": "new"}), out, replace=True)
    assert _tree(out) == {"a.txt": "new"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # neither staging nor the old one is left


def test_publish_dir_with_replace_moves_a_symlink_aside_not_its_target(tmp_path):
    target = _folder(tmp_path / "target", {"keep.txt": "old"})
    out = tmp_path / "out"
    out.symlink_to(target)
    publish_dir(_folder(tmp_path / "staging", {"a.txt": "new"}), out, replace=True)
    assert not out.is_symlink() and _tree(out) == {"a.txt": "new"}
    assert _tree(target) == {"keep.txt": "old"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "target"]


def test_publish_dir_never_empties_through_a_symlink(tmp_path):
    """A symlink to an empty folder is not an empty destination: it is refused, or moved aside with replace."""
    target = tmp_path / "target"
    target.mkdir()
    out = tmp_path / "out"
    out.symlink_to(target)
    with pytest.raises(PublishError, match="exists and is not empty"):
        publish_dir(_folder(tmp_path / "staging", {"a.txt": "new"}), out)
    assert out.is_symlink() and target.is_dir()
    publish_dir(tmp_path / "staging", out, replace=True)
    assert not out.is_symlink() and _tree(out) == {"a.txt": "new"} and list(target.iterdir()) == []


def _fail_renames_of(monkeypatch, source: Path) -> list[tuple[str, str]]:
    """Make ``os.rename(source, ...)`` fail once; every rename is recorded."""
    real, calls = os.rename, []

    def rename(src, dst):
        calls.append((str(src), str(dst)))
        if Path(src) == source and sum(Path(s) == source for s, _ in calls) == 1:
            raise OSError("disk on fire")
        real(src, dst)

    monkeypatch.setattr(atomic.os, "rename", rename)
    return calls


def test_publish_dir_restores_the_old_folder_when_the_final_rename_fails(tmp_path, monkeypatch):
    out = _folder(tmp_path / "out", {"keep.txt": "old"})
    staging = _folder(tmp_path / "staging", {"a.txt": "new"})
    calls = _fail_renames_of(monkeypatch, staging)
    with pytest.raises(PublishError, match="could not move the finished output.*disk on fire"):
        publish_dir(staging, out, replace=True)
    assert _tree(out) == {"keep.txt": "old"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "staging"]  # the aside copy went back
    aside = calls[0][1]
    assert calls == [(str(out), aside), (str(staging), str(out)), (aside, str(out))]


def test_publish_dir_rename_failure_without_an_old_folder(tmp_path, monkeypatch):
    staging = _folder(tmp_path / "staging", {"a.txt": "new"})
    _fail_renames_of(monkeypatch, staging)
    with pytest.raises(PublishError, match="disk on fire"):
        publish_dir(staging, tmp_path / "out")
    assert not (tmp_path / "out").exists() and _tree(staging) == {"a.txt": "new"}


@pytest.mark.parametrize("mask", [0o022, 0o077])
def test_published_folders_and_files_get_the_umask_permissions(tmp_path, umask, mask):
    umask(mask)
    staging = Path(atomic.tempfile.mkdtemp(dir=tmp_path))  # mkdtemp's 0700, as staging_dir makes it
    _folder(staging, {"a.txt": "x", "sub/b.txt": "y"})
    (staging / "a.txt").chmod(0o600)
    publish_dir(staging, tmp_path / "out")
    out = tmp_path / "out"
    assert {_mode(p) for p in (out, out / "sub")} == {0o777 & ~mask}
    assert {_mode(p) for p in (out / "a.txt", out / "sub" / "b.txt")} == {0o666 & ~mask}


# ---- staging_dir


def test_staging_dir_publishes_when_the_block_ends(tmp_path):
    with staging_dir(tmp_path / "deep" / "model") as tmp:
        assert tmp.parent == tmp_path / "deep" and tmp.name.startswith(".model.tmp-")
        (tmp / "config.json").write_text("{}")
        assert not (tmp_path / "deep" / "model").exists()  # nothing is visible before the end
    assert _tree(tmp_path / "deep") == {"model/config.json": "{}"}


def test_staging_dir_error_leaves_the_destination_as_it_was(tmp_path):
    out = _folder(tmp_path / "model", {"keep.txt": "old"})
    with pytest.raises(RuntimeError, match="build failed"), staging_dir(out, replace=True) as tmp:
        (tmp / "half.bin").write_text("half")
        raise RuntimeError("build failed")
    assert _tree(out) == {"keep.txt": "old"}
    assert [p.name for p in tmp_path.iterdir()] == ["model"]


def test_staging_dir_replace_and_refusal(tmp_path):
    out = _folder(tmp_path / "model", {"keep.txt": "old"})
    with pytest.raises(PublishError), staging_dir(out) as tmp:
        (tmp / "new.txt").write_text("new")
    assert _tree(out) == {"keep.txt": "old"} and [p.name for p in tmp_path.iterdir()] == ["model"]
    with staging_dir(out, replace=True) as tmp:
        (tmp / "new.txt").write_text("new")
    assert _tree(out) == {"new.txt": "new"} and [p.name for p in tmp_path.iterdir()] == ["model"]
