"""What the collection tests share: one small request of the smoke config, and reading what it wrote."""

from __future__ import annotations

import pyarrow.parquet as pq

from tests.helpers import CONFIGS_DIR

__all__ = ["K", "MAX_TOKENS", "TRAIN", "VAL", "argv", "read_rows", "shard_bytes"]

K, TRAIN, VAL, MAX_TOKENS = 3, 4, 2, 8


def argv(model, out, *extra: str) -> list[str]:
    """The smoke config's items 1-4 (train) and 0-1 (val), K samples each, shards of 2 items, batches of 1."""
    return [
        "--config-path", str(CONFIGS_DIR / "smoke"), "--config-name", "cpu", "--model-path", str(model),
        "--out", str(out), "--samples", str(K), "--train-start", "1", "--train-items", str(TRAIN),
        "--val-items", str(VAL), "--shard-size", "2", "--batch-size", "1", "--max-tokens", str(MAX_TOKENS),
        "--device", "cpu", "--seed", "7", *extra,
    ]  # fmt: skip


def read_rows(folder) -> list[dict]:
    return [row for path in sorted(folder.glob("*.parquet")) for row in pq.read_table(path).to_pylist()]


def shard_bytes(out) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.glob("*/*.parquet"))}
