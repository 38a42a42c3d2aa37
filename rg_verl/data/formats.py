"""The column layouts of file datasets (``gsm8k``, ``math``) and the shape of a ``source``; it imports no config."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rg_verl.common.final_answer import gsm8k_reference, last_boxed
from rg_verl.common.names import SPLITS
from rg_verl.common.schema import ConfigError, check
from rg_verl.data.curriculum import LevelCurriculum

__all__ = [
    "FILE_SUFFIXES",
    "FORMATS",
    "FileSource",
    "Format",
    "check_curriculum_levels",
    "check_filter",
    "gsm8k_entry",
    "math_entry",
    "parse_level",
    "parse_source",
]

FILE_SUFFIXES = (".parquet", ".jsonl", ".json")
HUB_KEYS = ("hub", "name", "split")
# the bounds of a level filter (MATH's levels are 1 to 5)
LEVEL_FILTER_RANGE = (0, 100)

_LEVEL = re.compile(r"^\s*(?:level\s*)?(\d+)\s*$", re.IGNORECASE)


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


@dataclass
class FileSource:
    """A mix entry's ``source``: a :data:`FORMATS` key and a file (or hub split) per split; ``eval`` defaults to val."""

    format: str
    files: dict[str, Any] = field(default_factory=dict)

    def file(self, split: str) -> Any:
        if split == "eval" and "eval" not in self.files:
            split = "val"
        return self.files.get(split)

    def required_file(self, where: str, name: str, split: str) -> Any:
        """The file of ``split``, or a ConfigError at ``<where>.source.<split>`` (``where``: the mix entry)."""
        file = self.file(split)
        if file is None:
            raise ConfigError(f"{where}.source.{split}: missing; set the {split} file of dataset {name!r}")
        return file


def _parse_file(where: str, value: Any) -> Any:
    """One split's file: a local path with a known suffix, or ``{hub, name, split}``."""
    if isinstance(value, dict):
        unknown = [key for key in value if key not in HUB_KEYS]
        if unknown or not isinstance(value.get("hub"), str) or not isinstance(value.get("split"), str):
            raise ConfigError(
                f"{where}: {value!r} is not a hub source; set {{hub: org/name, name: config, split: train}} "
                "(name is optional) or a local file path"
            )
        return dict(value)
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: {value!r} is not a file; set a local {'/'.join(FILE_SUFFIXES)} path")
    if not value.endswith(FILE_SUFFIXES):
        raise ConfigError(f"{where}: {value!r} is not a {', '.join(FILE_SUFFIXES)} file; convert it or point to one")
    return value


def parse_source(where: str, value: Any) -> FileSource:
    """A mix entry's ``source``: ``{format, train, val, eval}``, checked for its shape only."""
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected {{format, train, val, eval}}, got {value!r}")
    unknown = [key for key in value if key not in ("format", *SPLITS)]
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]}: unknown key; valid keys: format, {', '.join(SPLITS)}")
    layout = value.get("format")
    if layout not in FORMATS:
        raise ConfigError(f"{where}.format: {layout!r} is not a layout; set one of {', '.join(FORMATS)}")
    files = {split: _parse_file(f"{where}.{split}", value[split]) for split in SPLITS if value.get(split)}
    return FileSource(format=layout, files=files)


def check_filter(where: str, layout: str, config: dict) -> None:
    """The ``config`` of a file dataset: only its format's keys (``math``: min/max level, types)."""
    keys = FORMATS[layout].config_keys
    for key in config:
        if key not in keys:
            valid = ", ".join(keys) or "none"
            raise ConfigError(f"{where}.{key}: unknown key for format {layout!r}; valid keys: {valid}")
    low, high = LEVEL_FILTER_RANGE
    for key in ("min_level", "max_level"):
        if key in config:
            check(f"{where}.{key}", int, config[key], low=low, high=high)
    if config.get("min_level", low) > config.get("max_level", high):
        raise ConfigError(f"{where}: min_level {config['min_level']} exceeds max_level {config['max_level']}")
    types = config.get("types")
    if types is not None and (not isinstance(types, list) or not all(isinstance(t, str) for t in types)):
        raise ConfigError(f"{where}.types: {types!r} is not a list of names; set e.g. [Algebra, Geometry]")


def check_curriculum_levels(where: str, source: FileSource, config: dict, levels: dict) -> None:
    """A file dataset's curriculum levels: ``{max_level: start}``, a level (MATH: 1-5) within ``config``'s filter."""
    if not FORMATS[source.format].has_levels:
        raise ConfigError(f"{where}: format {source.format!r} has no difficulty level to follow; remove it")
    low, high = LevelCurriculum.level_range(config)
    for attribute, level in levels.items():
        if attribute not in ("*", LevelCurriculum.ATTRIBUTE):
            raise ConfigError(f"{where}.{attribute}: unknown attribute; valid: {LevelCurriculum.ATTRIBUTE}")
        check(f"{where}.{attribute}", int, level, low=low, high=high)
