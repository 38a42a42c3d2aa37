"""Results on disk: items.jsonl grows a fsynced line per finished item (a torn last line is cut off on reading)."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path

logger = logging.getLogger(__name__)

__all__ = ["ItemStore"]


class ItemStore:
    """The JSONL file of finished items, each a dict with a unique ``key``."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def load(self) -> dict[str, dict]:
        """Every finished item by key; cuts a torn last line off the file."""
        if not self.path.exists():
            return {}
        records: dict[str, dict] = {}
        good_bytes = 0
        with open(self.path, "rb") as f:
            for line in f:
                try:
                    record = json.loads(line) if line.endswith(b"\n") else None
                except ValueError:
                    record = None
                if not isinstance(record, dict) or "key" not in record:
                    logger.warning("%s: dropping a torn or unreadable line at byte %d and after", self.path, good_bytes)
                    break
                good_bytes += len(line)
                if record["key"] in records:
                    logger.warning("%s: %s appears twice; keeping the first", self.path, record["key"])
                    continue
                records[record["key"]] = record
        if good_bytes < self.path.stat().st_size:
            with open(self.path, "r+b") as f:
                f.truncate(good_bytes)
        return records

    def append(self, records: Iterable[dict]) -> None:
        """Appends ``records`` in one write and fsyncs it."""
        data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode()
        if not data:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "ab") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
