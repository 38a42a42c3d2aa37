"""OREO's trajectory files (a row per completion, metadata per shard): their schema, writing and loading."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import random
import shutil
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from rg_verl.common.atomic import write_atomic
from rg_verl.common.schema import ConfigError
from rg_verl.common.tokenizer import tokenizer_fingerprint

__all__ = [
    "BASE_COLUMNS", "MANIFEST", "METADATA_KEY", "REQUIRED_COLUMNS", "Trajectory", "balance",
    "load_trajectories", "open_collection", "shard_is_stored", "shard_name", "shard_table",
    "write_shard",
]  # fmt: skip

logger = logging.getLogger(__name__)

MANIFEST = "manifest.json"
METADATA_KEY = "rg_verl.oreo"
_FIX = "collect it again with rg-verl oreo collect (--resume rewrites missing shards)"

_IDS = pa.list_(pa.int64())
BASE_FIELDS: tuple[tuple[str, pa.DataType], ...] = (
    ("uid", pa.string()), ("split", pa.string()), ("index", pa.int64()), ("sample_idx", pa.int64()),
    ("data_source", pa.string()), ("prompt", pa.string()), ("prompt_ids", _IDS), ("response", pa.string()),
    ("response_ids", _IDS), ("ids_source", pa.string()), ("finished", pa.bool_()),
)  # fmt: skip
BASE_COLUMNS = tuple(name for name, _ in BASE_FIELDS)
# reward columns every shard has; the scorer's other values follow them
FIRST_REWARDS = ("score", "accuracy")
REQUIRED_COLUMNS = BASE_COLUMNS + FIRST_REWARDS


def shard_name(number: int) -> str:
    """The file name of shard ``number`` of a split: ``trajectories-00000.parquet``, ..."""
    return f"trajectories-{number:05d}.parquet"


def _reward_keys(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The reward columns of ``rows``: score and accuracy first, then the others in the order first seen."""
    keys = dict.fromkeys(FIRST_REWARDS)
    for row in rows:
        keys.update(dict.fromkeys(key for key in row if key not in BASE_COLUMNS))
    return list(keys)


def shard_table(rows: Sequence[Mapping[str, Any]], metadata: Mapping[str, Any]) -> pa.Table:
    """The parquet table of one shard: base and reward columns, and ``metadata`` as JSON under :data:`METADATA_KEY`."""
    fields = [pa.field(name, kind) for name, kind in BASE_FIELDS]
    fields += [pa.field(key, pa.float64()) for key in _reward_keys(rows)]
    schema = pa.schema(fields, metadata={METADATA_KEY: json.dumps(dict(metadata), sort_keys=True)})
    return pa.Table.from_pylist([dict(row) for row in rows], schema=schema)


def write_shard(path: str | os.PathLike, rows: Sequence[Mapping[str, Any]], metadata: Mapping[str, Any]) -> None:
    """Write one shard to ``path`` atomically: a reader sees no file or the whole one."""
    sink = pa.BufferOutputStream()
    pq.write_table(shard_table(rows, metadata), sink)
    write_atomic(path, sink.getvalue().to_pybytes())


def shard_is_stored(path: Path, metadata: Mapping[str, Any]) -> bool:
    """Whether ``path`` holds the finished shard ``metadata`` describes (shards are written whole)."""
    if not path.is_file():
        return False
    try:
        stored = json.loads(pq.read_schema(path).metadata[METADATA_KEY.encode()])
    except Exception as error:  # unreadable or foreign: never silently written over
        raise ConfigError(f"out: {path} is not a shard of this collection ({error!r}); delete it and resume") from None
    if stored != json.loads(json.dumps(dict(metadata))):
        raise ConfigError(f"out: {path} was written for other settings ({stored}); delete it and resume")
    return True


def _dig(mapping: Any, dotted: str) -> Any:
    for key in dotted.split("."):
        mapping = mapping.get(key) if isinstance(mapping, dict) else None
    return mapping


def open_collection(
    out: Path, manifest: dict, *, resume: bool, overwrite: bool, fixed: Mapping[str, str], splits: Sequence[str]
) -> dict:
    """Prepare the collection folder ``out`` and write its manifest; returns the manifest written."""
    stored_file = out / MANIFEST
    if stored_file.is_file() and resume and not overwrite:
        stored = json.loads(stored_file.read_text())
        for name, option in fixed.items():
            if _dig(stored, name) != _dig(manifest, name):
                raise ConfigError(
                    f"{name}: {_dig(manifest, name)!r} differs from {_dig(stored, name)!r} in the collection being "
                    f"resumed ({out}); set it back ({option}), or collect into another --out (or pass --overwrite)"
                )
        manifest = {**manifest, "created": stored.get("created", manifest.get("created"))}
    elif overwrite:
        stored_file.unlink(missing_ok=True)
        for split in splits:
            shutil.rmtree(out / split, ignore_errors=True)
    elif stored_file.is_file():
        raise ConfigError(f"out: {out} holds a collection; pass --resume to continue it, or --overwrite to replace it")
    elif out.is_dir() and any(out.iterdir()):
        raise ConfigError(f"out: {out} exists and is not empty; choose a new folder, or pass --overwrite")
    write_atomic(stored_file, json.dumps(manifest, indent=2) + "\n")
    return manifest


@dataclass(frozen=True)
class Trajectory:
    """One stored completion, ready for training."""

    uid: str
    split: str
    index: int
    sample_idx: int
    data_source: str
    prompt_ids: tuple[int, ...]
    response_ids: tuple[int, ...]
    reward: float
    accuracy: float
    finished: bool
    prompt: str = ""
    response: str = ""


def _files(path: str | os.PathLike | Sequence[str | os.PathLike]) -> list[Path]:
    """The parquet files ``path`` names: a split folder's shards (sorted), a file, or a list of either."""
    if isinstance(path, str | os.PathLike):
        path = [path]
    files: list[Path] = []
    for entry in path:
        entry = Path(entry).expanduser()
        if not entry.exists():
            raise ConfigError(
                f"trajectories: {entry} does not exist; give a collection's split folder (<out>/train), "
                "a parquet file, or a list of them, or collect one with rg-verl oreo collect --out DIR"
            )
        if entry.is_dir():
            shards = sorted(p for p in entry.glob("*.parquet") if p.is_file())
            if not shards:
                top = (entry / MANIFEST).exists()
                hint = " (a collection folder: give one of its split folders, e.g. <out>/train)" if top else ""
                raise ConfigError(f"trajectories: {entry} holds no parquet files{hint}; {_FIX}")
            files += shards
        else:
            files.append(entry)
    return files


def _read(file: Path) -> pa.Table:
    if file.stat().st_size == 0:
        raise ConfigError(f"trajectories: {file} is empty (0 bytes); delete it and {_FIX}")
    try:
        table = pq.read_table(file)
    except (pa.ArrowException, OSError) as error:
        raise ConfigError(
            f"trajectories: {file} is not a readable parquet file ({error}); delete it and {_FIX}"
        ) from None
    missing = [name for name in REQUIRED_COLUMNS if name not in table.column_names]
    if missing:
        raise ConfigError(
            f"trajectories: {file} lacks the columns {', '.join(missing)}; it is not a trajectory shard of "
            f"rg-verl oreo collect: {_FIX}"
        )
    if table.num_rows == 0:
        raise ConfigError(f"trajectories: {file} holds no trajectories; delete it and {_FIX}")
    return table


def _metadata(file: Path, table: pa.Table) -> dict:
    """The shard's own metadata, else the manifest of the collection it lies in (``<out>/<split>/x.parquet``)."""
    raw = (table.schema.metadata or {}).get(METADATA_KEY.encode())
    if raw is not None:
        return json.loads(raw)
    for manifest in (file.parent / MANIFEST, file.parent.parent / MANIFEST):
        if manifest.is_file():
            return json.loads(manifest.read_text())
    return {}


def _check_tokenizer(file: Path, metadata: Mapping[str, Any], expected: str) -> None:
    stored = metadata.get("tokenizer_fingerprint")
    if stored is None:
        raise ConfigError(
            f"trajectories: {file} records no tokenizer fingerprint (neither in its metadata nor in a "
            f"{MANIFEST} beside it), so its ids cannot be checked against the policy's tokenizer; {_FIX}"
        )
    if stored != expected:
        raise ConfigError(
            f"trajectories: {file} was tokenised with another tokenizer (fingerprint {stored}, the policy's is "
            f"{expected}): its ids would mean other tokens; collect again with the policy's tokenizer "
            "(rg-verl oreo collect --model-path <the policy>), or train the policy the collection was made with"
        )


def _rewards(file: Path, table: pa.Table, key: str) -> list:
    floats = [field.name for field in table.schema if pa.types.is_floating(field.type)]
    available = [name for name in floats if name not in BASE_COLUMNS]
    if key not in available:
        raise ConfigError(f"reward_key: {key!r} is not a reward column of {file}; available: {', '.join(available)}")
    return table.column(key).to_pylist()


def _rows(file: Path, table: pa.Table, key: str, mul: float, add: float) -> list[Trajectory]:
    names = ("uid", "split", "index", "sample_idx", "data_source", "prompt_ids", "response_ids", "accuracy", "prompt")
    columns = {name: table.column(name).to_pylist() for name in names + ("response", "finished")}
    rewards = _rewards(file, table, key)
    rows = []
    for i, raw in enumerate(rewards):
        uid, accuracy = columns["uid"][i], columns["accuracy"][i]
        reward = None if raw is None else float(raw) * mul + add
        for name, value in ((key, raw), (f"{key} * {mul} + {add}", reward), ("accuracy", accuracy)):
            if value is None or not math.isfinite(value):
                raise ConfigError(
                    f"trajectories: {file}, {uid} sample {columns['sample_idx'][i]}: {name} is {value!r}, not a "
                    f"finite number; choose another reward_key (or reward_mul, reward_add), or {_FIX}"
                )
        for name in ("prompt_ids", "response_ids"):
            if not columns[name][i]:
                raise ConfigError(f"trajectories: {file}, {uid}: {name} is empty; delete the file and {_FIX}")
        rows.append(
            Trajectory(
                uid=uid, split=columns["split"][i], index=int(columns["index"][i]),
                sample_idx=int(columns["sample_idx"][i]), data_source=columns["data_source"][i],
                prompt_ids=tuple(columns["prompt_ids"][i]), response_ids=tuple(columns["response_ids"][i]),
                reward=reward, accuracy=float(accuracy), finished=bool(columns["finished"][i]),
                prompt=columns["prompt"][i], response=columns["response"][i],
            )
        )  # fmt: skip
    return rows


def _field(row: Any, name: str) -> Any:
    return row[name] if isinstance(row, Mapping) else getattr(row, name)


def balance(rows: Iterable[Any], m: int) -> list[Any]:
    """OREO's balancing per ``uid``: up to ``m`` right and wrong, #right <= max(#wrong, 1), lowest sample first."""
    rows = list(rows)
    if isinstance(m, bool) or not isinstance(m, int) or m < 1:
        raise ConfigError(f"balance: {m!r} is not a positive number of completions per kind; set one, e.g. 4")
    kinds: dict[tuple[Any, bool], list[tuple[int, int]]] = defaultdict(list)
    for position, row in enumerate(rows):
        kinds[(_field(row, "uid"), _field(row, "accuracy") == 1)].append((_field(row, "sample_idx"), position))
    keep: set[int] = set()
    for uid in {uid for uid, _ in kinds}:
        wrong = sorted(kinds.get((uid, False), []))[:m]
        right = sorted(kinds.get((uid, True), []))[: min(m, max(len(wrong), 1))]
        keep.update(position for _, position in wrong + right)
    return [row for position, row in enumerate(rows) if position in keep]


_balance = balance  # load_trajectories' own argument is named balance, as the rule's m


def load_trajectories(
    path: str | os.PathLike | Sequence[str | os.PathLike],
    *,
    reward_key: str = "accuracy",
    reward_mul: float = 1.0,
    reward_add: float = 0.0,
    balance: int | None = None,
    max_length: int | None = None,
    tokenizer: Any = None,
    permute_seed: int | None = None,
) -> list[Trajectory]:
    """The trajectories of ``path`` (a split folder, a parquet file, or a list), in file then row order.

    ``reward = row[reward_key] * reward_mul + reward_add``; ``permute_seed`` shuffles (reward, accuracy) pairs.
    """
    expected = tokenizer_fingerprint(tokenizer) if tokenizer is not None else None
    rows: list[Trajectory] = []
    seen: dict[tuple[str, int], Path] = {}
    for file in _files(path):
        table = _read(file)
        if expected is not None:
            _check_tokenizer(file, _metadata(file, table), expected)
        for row in _rows(file, table, reward_key, reward_mul, reward_add):
            where = seen.setdefault((row.uid, row.sample_idx), file)
            if where is not file:
                raise ConfigError(
                    f"trajectories: {row.uid} sample {row.sample_idx} is in both {where} and {file}; "
                    "give each collection (and each file) once"
                )
            rows.append(row)
    if max_length is not None:
        kept = [row for row in rows if len(row.prompt_ids) + len(row.response_ids) <= max_length]
        if not kept:
            raise ConfigError(f"max_length: all {len(rows)} trajectories are longer than {max_length}; raise it")
        if len(kept) < len(rows):
            logger.warning("dropped %d of %d trajectories longer than max_length %d", len(rows) - len(kept),
                           len(rows), max_length)  # fmt: skip
        rows = kept
    if balance is not None:
        rows = _balance(rows, balance)
    if permute_seed is not None:
        labels = [(row.reward, row.accuracy) for row in rows]
        random.Random(permute_seed).shuffle(labels)
        rows = [dataclasses.replace(row, reward=r, accuracy=a) for row, (r, a) in zip(rows, labels, strict=True)]
    return rows
