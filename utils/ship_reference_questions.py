"""Write the list of reasoning-gym's evaluation questions that rg-verl's training never sees.

    PYTHONHASHSEED=0 python utils/ship_reference_questions.py

The question hash of every reference item of every generator entry of ``evaluation/configs/**`` goes into
``rg_verl/data/reference_questions.txt``, sorted, under a header with a digest of the entries (docs/data.md).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rg_verl.common.atomic import write_atomic  # noqa: E402
from rg_verl.data.reference_questions import LIST_FILE, ReferenceItems, list_header  # noqa: E402
from rg_verl.evaluation.config import load_config  # noqa: E402

CONFIGS = REPO / "evaluation" / "configs"


def shipped_entries() -> list[tuple[str, dict, int, int]]:
    """``(dataset, params, seed, size)`` of every generator entry of the shipped evaluation configs."""
    entries = []
    for path in sorted(CONFIGS.rglob("*.yaml")):
        config = load_config(path)
        entries += [
            (entry.dataset, entry.params, entry.seed, entry.size)
            for category in config.categories
            for entry in category.datasets
            if entry.source is None
        ]
    return entries


def distinct_entries(entries: list[tuple[str, dict, int, int]]) -> dict[tuple[str, str, int], int]:
    """``(dataset, params as JSON, seed) -> the largest size``: a smaller size's items are a prefix of it."""
    largest: dict[tuple[str, str, int], int] = {}
    for name, params, seed, size in entries:
        key = (name, json.dumps(params, sort_keys=True), seed)
        largest[key] = max(largest.get(key, 0), size)
    return largest


def question_hashes(entries: list[tuple[str, dict, int, int]], verbose: bool = False) -> set[str]:
    """The question hashes of every reference item of ``entries``."""
    hashes: set[str] = set()
    for (name, params, seed), size in sorted(distinct_entries(entries).items()):
        start = time.perf_counter()
        hashes.update(ReferenceItems(name, json.loads(params), seed, size).hashes())
        if verbose:
            print(f"{name} {params} seed {seed}: {size} items, {time.perf_counter() - start:.1f} s", flush=True)
    return hashes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.parse_args(argv)
    if os.environ.get("PYTHONHASHSEED") != "0":
        parser.error("run it with PYTHONHASHSEED=0, as training runs are")
    start = time.perf_counter()
    entries = shipped_entries()
    hashes = question_hashes(entries, verbose=True)
    header = list_header(entries, importlib.metadata.version("reasoning-gym"))
    write_atomic(LIST_FILE, "\n".join(header + sorted(hashes)) + "\n")
    elapsed = time.perf_counter() - start
    print(f"wrote {len(hashes)} questions of {len(entries)} entries to {LIST_FILE} in {elapsed:.0f} s")
    print("now run PYTHONHASHSEED=0 python utils/ship_searches.py: the shipped searches passed over the old list")
    return 0


if __name__ == "__main__":
    sys.exit(main())
