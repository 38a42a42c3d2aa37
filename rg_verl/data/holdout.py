"""Which split a question belongs to: a stable, salted hash of its text (``docs/data.md``, Held out means held out).

>>> split_of("What is  2 + 2?\\n") == split_of("What is 2 + 2?")  # runs of whitespace do not count
True
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from rg_verl.common.names import SPLIT_SHARES, SPLITS

__all__ = ["normalise", "question_hash", "question_point", "split_of", "share_bounds"]

# the salt names the rule and its version: changing the rule changes it, and with it every assignment
SALT = b"rg-verl/held-out/v1"


def normalise(text: Any) -> str:
    """The question text that the split rule reads: runs of whitespace are one space, ends stripped."""
    return " ".join(str(text).split())


# a Python object's default repr holds its memory address, which changes with every generation (codeio)
_ADDRESS = re.compile(r" object at 0x[0-9a-fA-F]+>")


def question_hash(text: Any) -> str:
    """A stable 16-hex-digit hash of a question's normalised text; memory addresses in reprs do not count."""
    stable = _ADDRESS.sub(" object at 0x>", normalise(text))
    return hashlib.blake2b(stable.encode("utf-8"), digest_size=8, key=SALT).hexdigest()


def question_point(text: Any) -> float:
    """The question's hash as a point in ``[0, 1)``."""
    return int(question_hash(text), 16) / 2**64


def share_bounds(split: str) -> tuple[float, float]:
    """``[low, high)``: the part of ``[0, 1)`` whose questions belong to ``split``.

    >>> share_bounds("train"), share_bounds("eval")[1]
    ((0.0, 0.9), 1.0)
    """
    low = sum((SPLIT_SHARES[s] for s in SPLITS[: SPLITS.index(split)]), 0.0)
    high = 1.0 if split == SPLITS[-1] else low + SPLIT_SHARES[split]
    return low, high


_BOUNDS = [share_bounds(split)[1] for split in SPLITS]


def split_of(text: Any) -> str:
    """The split that question ``text`` belongs to."""
    point = question_point(text)
    return next(split for split, high in zip(SPLITS, _BOUNDS, strict=True) if point < high)
