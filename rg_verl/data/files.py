"""GSM8K and MATH from files: a split's rows as reasoning-gym entries, checked before a run (``docs/math.md``)."""

from __future__ import annotations

import functools
import json
import logging
import os
import random
from collections.abc import Sequence
from typing import Any

from rg_verl.common.names import FILE_CATEGORY
from rg_verl.common.schema import ConfigError
from rg_verl.data.config import DatasetSpec, ReasoningGymConfig
from rg_verl.data.curriculum import LevelCurriculum
from rg_verl.data.formats import FILE_SUFFIXES, FORMATS, FileSource
from rg_verl.data.holdout import normalise

__all__ = ["FileDataset", "SourceError", "check_sources", "open_split", "read_rows", "training_questions"]

logger = logging.getLogger(__name__)


class SourceError(ValueError):
    """A file source that cannot be read or has the wrong layout; the message names the file."""


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
    """The rows of a ``.parquet``, ``.jsonl`` or ``.json`` file or a ``{hub, name, split}``, read once per process."""
    return _cached_rows(json.dumps(source, sort_keys=True))


def _check_columns(label: str, rows: Sequence[Any], layout: str) -> None:
    """Every row is a record with the columns of format ``layout``; else the first bad row is named."""
    columns = FORMATS[layout].columns
    for index, row in enumerate(rows):
        if not isinstance(row, dict):
            raise SourceError(f"{label}: row {index} is {type(row).__name__}, not a record of named columns")
        missing = [c for c in columns if c not in row]
        if missing:
            raise SourceError(
                f"{label}: row {index} has no column {', '.join(map(repr, missing))} for format "
                f"{layout!r} (it has {', '.join(map(repr, row))}); expected {', '.join(columns)}"
            )


def _passes(entry: dict, config: dict) -> bool:
    """Whether an entry passes the level and type filters of a mix entry's ``config``."""
    min_level, max_level = config.get("min_level"), config.get("max_level")
    level = entry["metadata"].get("level")
    if (min_level is not None or max_level is not None) and level is None:
        return False
    if min_level is not None and level < min_level or max_level is not None and level > max_level:
        return False
    return not config.get("types") or entry["metadata"].get("type") in config["types"]


def _label(file: str | dict) -> str:
    """A file as the messages name it: its path, or its hub dataset and split."""
    if isinstance(file, str):
        return file
    name = f" {file['name']}" if file.get("name") else ""
    return f"hub {file.get('hub')}{name}, split {file.get('split')}"


def _entries(file: str | dict, layout: str) -> list[dict]:
    """The entries of every usable row of ``file`` in format ``layout``, its columns checked."""
    rows = read_rows(file)
    _check_columns(_label(file), rows, layout)
    to_entry = FORMATS[layout].to_entry
    return [entry for entry in (to_entry(row, index) for index, row in enumerate(rows)) if entry]


@functools.lru_cache(maxsize=16)
def _cached_questions(key: str, layout: str) -> frozenset[str]:
    return frozenset(normalise(entry["question"]) for entry in _entries(json.loads(key), layout))


def training_questions(source: FileSource) -> frozenset[str]:
    """The normalised questions of every usable row of the source's ``train`` file, whatever the filters."""
    file = source.files.get("train")
    return frozenset() if file is None else _cached_questions(json.dumps(file, sort_keys=True), source.format)


class FileDataset:
    """One split of a file source, filtered by the entry's ``config``; ``dropped`` counts training questions."""

    category = FILE_CATEGORY

    def __init__(self, name: str, source: FileSource, split: str, config: dict | None = None, seed: int = 0):
        self.name = name
        file = source.file(split)
        if file is None:
            raise SourceError(f"dataset {name!r} has no {split} file; set {split} in its source")
        label, total = _label(file), len(read_rows(file))
        entries = _entries(file, source.format)
        # filtered before the shuffle: item i stays a function of the seed, i and the two files
        self.dropped = 0
        if split != "train" and "train" in source.files:
            entries = self._held_out(entries, source, split, label, total)
        config = dict(config or {})
        entries = [entry for entry in entries if _passes(entry, config)]
        if not entries:
            raise SourceError(
                f"{label}: no usable row for dataset {name!r} (of {total} rows) with config {config}; "
                "check the file's format and the level/type filters"
            )
        # a seeded order: a short split samples the whole file, which is often sorted (MATH by subject)
        random.Random(seed).shuffle(entries)
        self.entries = entries

    def _held_out(self, entries: list[dict], source: FileSource, split: str, label: str, total: int) -> list[dict]:
        """``entries`` less those whose question is a training question; sets :attr:`dropped`."""
        train = training_questions(source)
        kept = [entry for entry in entries if normalise(entry["question"]) not in train]
        self.dropped = len(entries) - len(kept)
        train_label = _label(source.files["train"])
        if entries and not kept:
            raise SourceError(
                f"{label}: every usable row of dataset {self.name!r} ({len(entries)} of {total}) has a question "
                f"that is also in the training file {train_label}, so the {split} split has no item left; point "
                f"source.{split} at a file of other questions (the dataset's test split, say)"
            )
        if self.dropped:
            logger.warning(
                "%s: left out %d of %d rows whose question is also in the training file %s",
                label,
                self.dropped,
                total,
                train_label,
            )
        return kept

    def __len__(self) -> int:
        return len(self.entries)

    def __getitem__(self, index: int) -> dict:
        return self.entries[index % len(self.entries)]


def _check_exists(at: str, file: str | dict) -> None:
    if isinstance(file, str) and not os.path.isfile(os.path.expanduser(file)):
        raise ConfigError(
            f"{at}: {file!r} does not exist; download GSM8K and MATH with "
            "'python utils/download_math_data.py --out data' or point this field at your copy"
        )


def open_split(where: str, name: str, spec: DatasetSpec, split: str) -> FileDataset:
    """Split ``split`` of file dataset ``name``, or a ConfigError naming the field."""
    file = spec.source.required_file(where, name, split)
    if split != "train" and "train" in spec.source.files:
        _check_exists(f"{where}.source.train", spec.source.files["train"])
        try:
            training_questions(spec.source)
        except SourceError as error:
            raise ConfigError(f"{where}.source.train: {error}") from None
    at = f"{where}.source.{split}"
    _check_exists(at, file)
    try:
        return FileDataset(name, spec.source, split, spec.config)
    except SourceError as error:
        raise ConfigError(f"{at}: {error}") from None


def _check_lowest_level(where: str, dataset: FileDataset, config: dict) -> None:
    """A level curriculum can go down to the config's lowest level: training rows must exist there."""
    low, _ = LevelCurriculum.level_range(config)
    levels = (entry["metadata"].get("level") for entry in dataset.entries)
    if not any(level is not None and level <= low for level in levels):
        raise ConfigError(
            f"{where}: no training row has a level <= {low}, where the curriculum can go down to; "
            "raise the dataset's config.min_level or loosen its filters"
        )


def check_sources(
    settings: ReasoningGymConfig, splits: Sequence[str] = ("train", "val"), where: str = "reasoning_gym"
) -> None:
    """Read and check the file of every file dataset for each of ``splits``, before anything is built."""
    for split in splits:
        mix = settings.mix(split)
        mix_where = f"{where}.{'datasets' if mix is settings.datasets else 'val_datasets'}"
        for name, spec in mix.items():
            if spec.source is None:
                continue
            dataset = open_split(f"{mix_where}.{name}", name, spec, split)
            if split == "train" and name in settings.curriculum.levels:
                _check_lowest_level(f"{where}.curriculum.levels.{name}", dataset, spec.config)
