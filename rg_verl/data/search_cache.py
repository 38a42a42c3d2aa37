"""Held-out searches kept on disk: which candidate holds each validation or evaluation item (``docs/data.md``).

One file per candidate space, a line ``index attempt hash`` per item (``-1 -``: none) in one ``O_APPEND`` write.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rg_verl.common.names import MAX_ATTEMPTS
from rg_verl.data import reference_questions
from rg_verl.data.candidates import HASH_SEED_DEPENDENT
from rg_verl.data.holdout import SALT

logger = logging.getLogger(__name__)

__all__ = ["ENV", "SHIPPED", "SearchCache", "cache_dir", "space_key"]

ENV = "RG_VERL_SEARCH_CACHE"
SHIPPED = Path(__file__).with_name("shipped_searches")
# bump when what a candidate generates changes: hashes cannot catch it for spaces stored as having none
FORMAT = 1
NOT_FOUND = -1
_LINE = re.compile(r"(\d+) (-1|\d+) ([0-9a-f]{16}|-)")
_warned = False


def cache_dir() -> Path | None:
    """The user's cache folder, or None when ``$RG_VERL_SEARCH_CACHE`` is ``off``."""
    value = os.environ.get(ENV, "").strip()
    if value.lower() == "off":
        return None
    if value:
        return Path(value).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rg-verl" / "searches"


def space_key(name: str, config: Mapping[str, Any], seed: int, size: int, stride: int, split: str) -> dict | None:
    """What a candidate space's items depend on (``PYTHONHASHSEED`` too, for some), or None when random."""
    hash_seed = None
    if name in HASH_SEED_DEPENDENT:
        hash_seed = os.environ.get("PYTHONHASHSEED", "random")
        if hash_seed == "random":
            return None
    reasoning_gym = generator_version()
    return {
        "format": FORMAT,
        "rule": SALT.decode(),
        "reasoning_gym": reasoning_gym,
        "python_hash_seed": hash_seed,
        "generator": name,
        "config": json.loads(json.dumps(dict(config), sort_keys=True, default=repr)),
        "seed": seed,
        "size": size,
        "stride": stride,
        "split": split,
        "max_attempts": MAX_ATTEMPTS[split],
        "withheld": withheld_digest() if split != "eval" else None,
    }


def withheld_digest() -> str:
    """A digest of the questions the training and validation splits pass over (about 2 ms, so not cached)."""
    text = "\n".join(sorted(reference_questions.shipped_hashes()))
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


@functools.lru_cache(maxsize=1)
def generator_version() -> str | None:
    """reasoning-gym's version, and where a repository or folder install came from (its generators may change)."""
    try:
        distribution = importlib.metadata.distribution("reasoning-gym")
    except importlib.metadata.PackageNotFoundError:
        return None
    origin = distribution.read_text("direct_url.json")
    if origin is None:
        return distribution.version
    return f"{distribution.version}+{hashlib.blake2b(origin.encode(), digest_size=6).hexdigest()}"


def file_name(key: Mapping[str, Any]) -> str:
    digest = hashlib.blake2b(json.dumps(key, sort_keys=True).encode(), digest_size=8).hexdigest()
    return f"{key['generator']}-{key['split']}-{digest}.txt"


def read_lines(path: Path) -> dict[int, tuple[int, str | None]]:
    """The items a file holds; comment lines, torn lines and lines out of range are skipped."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    found = {}
    for line in text.splitlines():
        match = _LINE.fullmatch(line)
        if match is None:
            continue
        index, attempt, digest = int(match[1]), int(match[2]), match[3]
        if (attempt == NOT_FOUND) != (digest == "-"):
            continue
        found[index] = (attempt, None if digest == "-" else digest)
    return found


class SearchCache:
    """The stored searches of one candidate space, new lines to ``folder`` (None: none), over ``shipped`` files."""

    def __init__(self, key: Mapping[str, Any], folder: Path | None, shipped: Path | None):
        self.key = dict(key)
        name = file_name(self.key)
        self.found = read_lines(shipped / name) if shipped is not None else {}
        self.path = folder / name if folder is not None else None
        if self.path is not None:
            self.found.update(read_lines(self.path))
        # a line out of the space (a damaged or edited file) would send the search outside its seeds
        limit, size = MAX_ATTEMPTS[self.key["split"]], self.key["size"]
        self.found = {i: found for i, found in self.found.items() if i < size and found[0] < limit}

    @classmethod
    def open(cls, name: str, config: Mapping[str, Any], seed: int, size: int, stride: int, split: str):
        """A space's cache, the user's folder over the shipped one; None when off or the items follow the process."""
        key = space_key(name, config, seed, size, stride, split)
        folder = cache_dir()
        return None if key is None or folder is None else cls(key, folder, SHIPPED)

    def lookup(self, index: int) -> tuple[int, str | None] | None:
        """``(attempt, question hash)`` of item ``index`` (``(-1, None)``: no candidate), or None if unknown."""
        return self.found.get(index)

    def forget(self, index: int) -> None:
        self.found.pop(index, None)

    def record(self, index: int, attempt: int, digest: str | None) -> None:
        """Keep item ``index``'s search: the candidate that holds it (and its hash), or -1 and None."""
        self.found[index] = (attempt, digest)
        if self.path is not None:
            self._append(f"{index} {attempt} {digest or '-'}\n")

    def _append(self, line: str) -> None:
        global _warned
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
            try:
                if os.fstat(fd).st_size == 0:
                    line = f"# {json.dumps(self.key, sort_keys=True)}\n{line}"
                os.write(fd, line.encode())
            finally:
                os.close(fd)
        except OSError as error:
            if not _warned:
                _warned = True
                logger.warning(
                    "reasoning_gym: cannot keep held-out searches in %s (%s); each run searches again. "
                    "Set %s to a writable folder, or to off",
                    self.path.parent, error, ENV,
                )
            self.path = None
