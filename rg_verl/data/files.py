"""GSM8K and MATH from files: items in the same entry format as reasoning-gym's.

A mix entry of ``reasoning_gym.datasets`` with a ``source`` reads its items from a file
instead of generating them::

    reasoning_gym:
      datasets:
        gsm8k:
          source:
            format: gsm8k                      # the file's column layout: gsm8k or math
            train: data/gsm8k/train.parquet    # a local .parquet, .jsonl or .json file ...
            val: data/gsm8k/test.parquet
            # ... or datasets.load_dataset(hub, name, split=split), where a hub is reachable:
            # train: {hub: openai/gsm8k, name: main, split: train}
        math:
          source: {format: math, train: data/math/train.jsonl, val: data/math/test.jsonl}
          config: {min_level: 1, max_level: 5, types: [Algebra, Prealgebra]}

The two layouts are the public datasets' own:

- ``gsm8k`` (``openai/gsm8k``): ``question``, ``answer``. The reference is the text after the
  last ``####`` of ``answer``, without thousands separators.
- ``math`` (``hendrycks/competition_math``, ``EleutherAI/hendrycks_math``, ``MATH-500``):
  ``problem``, ``solution``, ``level`` (``"Level 3"`` or ``3``), ``type`` (or ``subject``). The
  reference is the content of the last ``\\boxed{}`` of ``solution`` (else an ``answer`` column).
  Rows without a reference are skipped. ``config`` filters by ``min_level``/``max_level`` and
  ``types``; rows whose level is unknown are kept only without a level filter.

Each entry is ``{"question", "answer", "metadata": {...}}``, like a reasoning-gym entry, so the
dataset, the reward and the evaluator handle both alike. Its data source is ``math/<name>``,
scored by math-verify's equivalence (``rg_verl.reward.math_verify``). ``eval`` defaults to ``val``.
Item ``i`` of a split is row ``i mod n`` of the filtered rows in a seeded order, so a split shorter
than its file draws from all of it (MATH files are sorted by subject), and ``n`` items cover every
row once. Cells that are empty, a missing question or an empty reference skip the row.

The difficulty curriculum (``rg_verl.data.curriculum.LevelCurriculum``) raises the maximum level over training.
"""

from __future__ import annotations

import functools
import json
import os
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rg_verl.reward.math_verify import gsm8k_reference, last_boxed
from rg_verl.vocab import FILE_CATEGORY

__all__ = [
    "FORMATS",
    "FileSource",
    "MathFileDataset",
    "gsm8k_entry",
    "math_entry",
    "read_rows",
]

FILE_SUFFIXES = (".parquet", ".jsonl", ".json")
HUB_KEYS = ("hub", "name", "split")
_LEVEL = re.compile(r"^\s*(?:level\s*)?(\d+)\s*$", re.IGNORECASE)


class SourceError(ValueError):
    """A file source that cannot be read or has the wrong layout; the message names the file."""


def parse_level(value: Any) -> int | None:
    """MATH's difficulty as an int: ``"Level 3"``, ``"3"`` and ``3`` give 3; ``"Level ?"`` gives None.

    >>> parse_level("Level 4"), parse_level(2), parse_level(3.0), parse_level("Level ?")
    (4, 2, 3, None)
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):  # pandas writes an int column with missing values as floats
        return int(value) if value.is_integer() else None
    match = _LEVEL.match(value) if isinstance(value, str) else None
    return int(match.group(1)) if match else None


def _text(value: Any) -> str:
    """A cell as text; a missing cell (None) is empty."""
    return "" if value is None else str(value)


def gsm8k_entry(row: dict, index: int) -> dict | None:
    """A GSM8K row (``question``, ``answer``) as an entry; None without a question or a ``#### n`` reference."""
    question, solution = _text(row["question"]), _text(row["answer"])
    reference = gsm8k_reference(solution) if "####" in solution else ""
    if not question.strip() or not reference:
        return None
    return {"question": question, "answer": reference, "metadata": {"row": index, "solution": solution}}


def math_entry(row: dict, index: int) -> dict | None:
    """A MATH row (``problem``, ``solution``, ``level``, ``type``) as an entry; None without problem or reference."""
    problem, solution = _text(row["problem"]), _text(row["solution"])
    answer = last_boxed(solution)
    if answer is None and row.get("answer") is not None:
        answer = str(row["answer"])
    if not problem.strip() or answer is None or not answer.strip():
        return None
    return {
        "question": problem,
        "answer": answer.strip(),
        "metadata": {
            "row": index,
            "solution": solution,
            "level": parse_level(row.get("level")),
            "type": row.get("type", row.get("subject")),
        },
    }


@dataclass(frozen=True)
class Format:
    """A column layout: the columns a row must have, and how a row becomes an entry."""

    columns: tuple[str, ...]
    to_entry: Callable[[dict, int], dict | None]
    # keys of the mix entry's ``config`` this format understands
    config_keys: tuple[str, ...] = ()
    # whether entries carry a difficulty level (``metadata.level``) that a curriculum can use
    has_levels: bool = False


FORMATS = {
    "gsm8k": Format(columns=("question", "answer"), to_entry=gsm8k_entry),
    "math": Format(
        columns=("problem", "solution"),
        to_entry=math_entry,
        config_keys=("min_level", "max_level", "types"),
        has_levels=True,
    ),
}


def _read_json(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        if path.endswith(".jsonl"):
            rows = []
            for number, line in enumerate(f, 1):
                if line.strip():
                    try:
                        rows.append(json.loads(line))
                    except ValueError as error:
                        raise SourceError(f"{path}: line {number} is not JSON ({error})") from None
            return rows
        try:
            data = json.load(f)
        except ValueError as error:
            raise SourceError(f"{path}: not a JSON file ({error})") from None
    if isinstance(data, dict) and isinstance(data.get("data"), list):
        data = data["data"]
    if not isinstance(data, list):
        raise SourceError(f"{path}: expected a JSON list of rows (or JSON lines)")
    return data


@functools.lru_cache(maxsize=16)
def _cached_rows(key: str) -> tuple[dict, ...]:
    source = json.loads(key)
    if isinstance(source, dict):
        try:
            import datasets
        except ImportError:  # pragma: no cover - verl depends on datasets
            raise SourceError("hub sources need the 'datasets' package: pip install datasets") from None
        try:
            table = datasets.load_dataset(source["hub"], source.get("name"), split=source["split"])
        except Exception as error:  # network, unknown dataset or split: the message says which
            raise SourceError(f"datasets.load_dataset{tuple(source.values())} failed: {error}") from None
        return tuple(dict(row) for row in table)
    path = os.path.expanduser(source)
    if not os.path.isfile(path):
        raise SourceError(f"{path}: no such file")
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq

        try:
            return tuple(pq.read_table(path).to_pylist())
        except Exception as error:  # pyarrow raises several types for a corrupt file
            raise SourceError(f"{path}: not a readable parquet file ({error})") from None
    if path.endswith((".jsonl", ".json")):
        return tuple(_read_json(path))
    raise SourceError(f"{path}: unsupported file type; use {', '.join(FILE_SUFFIXES)}")


def read_rows(source: str | dict) -> tuple[dict, ...]:
    """The rows of a local file (``.parquet``, ``.jsonl``, ``.json``) or of a hub dataset split.

    Args:
        source: a path, or ``{hub, name, split}`` for ``datasets.load_dataset(hub, name, split=split)``.

    Returns:
        The rows as dicts. Reads each source once per process.

    Raises:
        SourceError: naming the file, if it is missing, unreadable or of an unsupported type.
    """
    return _cached_rows(json.dumps(source, sort_keys=True))


@dataclass
class FileSource:
    """The ``source`` of a mix entry: a column layout and one file (or hub split) per split.

    Args:
        format: a key of :data:`FORMATS`.
        files: split -> a path or ``{hub, name, split}``; ``eval`` falls back to ``val``.
    """

    format: str
    files: dict[str, Any] = field(default_factory=dict)

    def file(self, split: str) -> Any:
        if split == "eval" and "eval" not in self.files:
            split = "val"
        return self.files.get(split)


class MathFileDataset:
    """The entries of one split of a file source, filtered by difficulty and type.

    Args:
        name: the mix entry's name (the data source is ``math/<name>``).
        source: the :class:`FileSource`.
        split: ``train``, ``val`` or ``eval``.
        config: the mix entry's ``config``: for ``math``, ``min_level``, ``max_level``, ``types``.
        seed: the seed of the rows' order (item ``i`` is row ``i mod n`` of that order).

    Raises:
        SourceError: if the split has no file, the file lacks the layout's columns, or no row
            is left after filtering. The message names the file and the fix.
    """

    category = FILE_CATEGORY

    def __init__(self, name: str, source: FileSource, split: str, config: dict | None = None, seed: int = 0):
        self.name = name
        file = source.file(split)
        if file is None:
            raise SourceError(f"dataset {name!r} has no {split} file; set {split} in its source")
        layout = FORMATS[source.format]
        rows = read_rows(file)
        label = file if isinstance(file, str) else f"hub {file.get('hub')}"
        for index, row in enumerate(rows):
            if not isinstance(row, dict):
                raise SourceError(f"{label}: row {index} is {type(row).__name__}, not a record of named columns")
            missing = [c for c in layout.columns if c not in row]
            if missing:
                raise SourceError(
                    f"{label}: row {index} has no column {', '.join(map(repr, missing))} for format "
                    f"{source.format!r} (it has {', '.join(map(repr, row))}); expected {', '.join(layout.columns)}"
                )
        config = dict(config or {})
        min_level, max_level = config.get("min_level"), config.get("max_level")
        types = set(config["types"]) if config.get("types") else None
        entries = []
        for index, row in enumerate(rows):
            entry = layout.to_entry(row, index)
            if entry is None:
                continue
            level = entry["metadata"].get("level")
            if (min_level is not None or max_level is not None) and level is None:
                continue
            if min_level is not None and level < min_level or max_level is not None and level > max_level:
                continue
            if types is not None and entry["metadata"].get("type") not in types:
                continue
            entries.append(entry)
        if not entries:
            raise SourceError(
                f"{label}: no usable row for dataset {name!r} (of {len(rows)} rows) with config {config}; "
                "check the file's format and the level/type filters"
            )
        # a seeded order: a split shorter than the file samples all of it, not its first rows
        # (files are often sorted, e.g. MATH by subject)
        random.Random(seed).shuffle(entries)
        self.entries = entries

    def __len__(self) -> int:
        return len(self.entries)

    def __getitem__(self, index: int) -> dict:
        return self.entries[index % len(self.entries)]
