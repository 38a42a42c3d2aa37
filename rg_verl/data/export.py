"""``rg-verl export``: a split of a config as parquet in verl's RLHF layout, with a manifest (``docs/data.md``)."""

from __future__ import annotations

import importlib.metadata
import json
import logging
import os
import shutil
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from rg_verl.common.atomic import PublishError, staging_dir
from rg_verl.common.names import MAX_ATTEMPTS, SPLIT_SHARES, SPLIT_URI, SPLITS
from rg_verl.common.schema import ConfigError, plain
from rg_verl.data.candidates import warn_unseeded_hash
from rg_verl.data.config import ReasoningGymConfig
from rg_verl.data.files import check_sources
from rg_verl.data.holdout import SALT

logger = logging.getLogger(__name__)

__all__ = ["SCHEMA", "export_split", "reasoning_gym_section", "to_row"]

MANIFEST = "manifest.json"
HF_FOLDER = "hf"
METADATA_KEY = "rg_verl"
COUNTS_KEY = "rg_verl.datasets"
# rows generated and written at a time: memory stays flat whatever the split's size
BATCH_ROWS = 1000

_EXTRA_INFO = ("split", "index", "dataset", "category", "question_hash")
SCHEMA = pa.schema(
    [
        ("prompt", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
        ("data_source", pa.string()),
        ("ability", pa.string()),
        ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
        (
            "extra_info",
            pa.struct([(key, pa.int64() if key == "index" else pa.string()) for key in _EXTRA_INFO + ("entry",)]),
        ),
    ]
)


def to_row(item: Mapping[str, Any]) -> dict[str, Any]:
    """The RLHF row of a ``ReasoningGymDataset`` item (its ``entry`` as a JSON string)."""
    info = item["extra_info"]
    return {
        "prompt": [{"role": m["role"], "content": m["content"]} for m in item["raw_prompt"]],
        "data_source": item["data_source"],
        "ability": info["category"],
        "reward_model": {"style": item["reward_model"]["style"], "ground_truth": item["reward_model"]["ground_truth"]},
        "extra_info": {**{key: info[key] for key in _EXTRA_INFO}, "entry": json.dumps(info["entry"])},
    }


def reasoning_gym_section(config: Any) -> dict[str, Any]:
    """The ``reasoning_gym`` section (of a training config, of verl's ``data`` section, or itself) as plain dicts."""
    if isinstance(config, Mapping):
        data = config.get("data")
        for section in (config.get("reasoning_gym"), data.get("reasoning_gym") if isinstance(data, Mapping) else None):
            if section is not None:
                return plain(section)
        if "datasets" in config:
            return plain(config)
    raise ConfigError(
        "config: no reasoning_gym section (looked for reasoning_gym, data.reasoning_gym and datasets); "
        "pass a composed training config or its reasoning_gym section"
    )


def _check_out(out_dir: str | os.PathLike, overwrite: bool) -> Path:
    """``out_dir`` as an absolute path, if an export may be published there."""
    out = Path(out_dir).expanduser().absolute()
    parent = next((p for p in out.parents if p.exists()), out)  # the nearest folder (or file) that exists
    if not parent.is_dir():
        raise NotADirectoryError(f"out: {parent} is a file, so {out} cannot be a folder; choose another --out")
    if overwrite or not (out.exists() or out.is_symlink()):
        return out
    if not out.is_dir():
        raise FileExistsError(f"out: {out} is a file; choose a folder for --out, or pass --overwrite to replace it")
    if any(out.iterdir()):
        raise FileExistsError(
            f"out: {out} exists and is not empty; pass --overwrite (overwrite=True) to replace it, "
            "or choose another folder"
        )
    return out


def _check_request(split: str, limit: int | None) -> None:
    if split not in SPLITS:
        raise ConfigError(f"split: {split!r} is not a split; use one of {', '.join(SPLITS)}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ConfigError(f"limit: {limit!r}; give a positive number of items, or none for the whole split")


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _log_repeats(counts: dict[str, dict[str, int]], split: str) -> None:
    for name, count in counts.items():
        if count["distinct_questions"] < count["items"]:
            logger.warning(
                "export: %s repeats questions in the %s split: %d items, %d distinct questions",
                name, split, count["items"], count["distinct_questions"],
            )


def _manifest(section: dict, dataset: Any, limit: int | None, hf: bool) -> dict[str, Any]:
    """What made the rows: everything but the per-dataset counts, which writing them gives."""
    split = dataset.split
    return {
        "format": "verl RLHF parquet: prompt, data_source, ability, reward_model, extra_info",
        "split": split,
        "rows": len(dataset),
        "split_size": dataset.size,
        "limit": limit,
        "seed": dataset.base_seed,
        "split_seed": dataset.split_seed,
        "held_out_rule": {
            "salt": SALT.decode(),
            "shares": dict(SPLIT_SHARES),
            "question_hash": "blake2b, 8 bytes, keyed with the salt, of the question's text with each run of "
            "whitespace as one space (rg_verl.data.holdout)",
            "max_attempts": MAX_ATTEMPTS[split],
        },
        "unreachable": dataset.unreachable,
        "versions": {name: _version(name) for name in ("rg-verl", "reasoning-gym", "verl")},
        "python_hash_seed": os.environ.get("PYTHONHASHSEED"),
        "files": {"parquet": f"{split}.parquet", "hf": HF_FOLDER if hf else None},
        "reasoning_gym": section,
    }


def _rows(dataset: Any) -> Iterator[list[dict[str, Any]]]:
    """The dataset's rows, :data:`BATCH_ROWS` at a time."""
    for start in range(0, len(dataset), BATCH_ROWS):
        yield [to_row(dataset[index]) for index in range(start, min(start + BATCH_ROWS, len(dataset)))]
        logger.info("export: %d of %d %s items", min(start + BATCH_ROWS, len(dataset)), len(dataset), dataset.split)


def _write_parquet(path: Path, dataset: Any, manifest: dict) -> dict[str, dict[str, int]]:
    """Write the dataset's rows to ``path``; returns per dataset its items and distinct questions."""
    schema = SCHEMA.with_metadata({METADATA_KEY: json.dumps(manifest)})
    items, questions = Counter(), defaultdict(set)
    with pq.ParquetWriter(path, schema) as writer:
        for rows in _rows(dataset):
            for row in rows:
                name = row["extra_info"]["dataset"]
                items[name] += 1
                questions[name].add(row["extra_info"]["question_hash"])
            writer.write_table(pa.Table.from_pylist(rows, schema=schema))
        counts = {name: {"items": items[name], "distinct_questions": len(questions[name])} for name in sorted(items)}
        writer.add_key_value_metadata({COUNTS_KEY: json.dumps(counts)})
    return counts


def _write_hf(parquet: Path, folder: Path, manifest: dict) -> None:
    """The parquet's rows as a ``datasets`` folder; ``datasets`` caches them beside it, then the cache goes."""
    import datasets

    cache = folder.parent / f".{folder.name}-cache"
    try:
        table = datasets.Dataset.from_parquet(str(parquet), split=manifest["split"], cache_dir=str(cache))
        table.info.description = json.dumps(manifest)
        table.save_to_disk(str(folder))
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def export_split(
    config: Any,
    split: str,
    out_dir: str | os.PathLike,
    *,
    hf: bool = False,
    limit: int | None = None,
    overwrite: bool = False,
) -> Path:
    """Write ``split`` to ``out_dir/<split>.parquet``, ``manifest.json``, ``hf/``; replaces only with ``overwrite``."""
    _check_request(split, limit)
    out = _check_out(out_dir, overwrite)
    section = reasoning_gym_section(config)
    settings = ReasoningGymConfig.from_section(section)
    check_sources(settings, splits=(split,))
    warn_unseeded_hash(settings.mix(split), logger, "items", "export the items that run sees")
    # deliberately lazy: the dataset imports torch, which rg-verl export --help and a bad config never need
    from rg_verl.data.dataset import ReasoningGymDataset

    dataset = ReasoningGymDataset(f"{SPLIT_URI}{split}", None, {"reasoning_gym": section}, max_samples=limit or -1)
    manifest = _manifest(section, dataset, limit, hf)
    try:
        with staging_dir(out, replace=overwrite) as tmp:
            manifest["datasets"] = _write_parquet(tmp / f"{split}.parquet", dataset, manifest)
            if hf:
                _write_hf(tmp / f"{split}.parquet", tmp / HF_FOLDER, manifest)
            (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    except PublishError as error:
        raise FileExistsError(f"out: {error}; pass --overwrite (overwrite=True) to replace it") from error
    _log_repeats(manifest["datasets"], split)
    logger.info("exported %d %s items to %s", len(dataset), split, out)
    return out
