"""Write the held-out searches that ship with rg-verl: every shipped config's validation split.

    PYTHONHASHSEED=0 python utils/ship_searches.py

Which candidate holds each validation item, so a first run of a shipped config generates one candidate per item
(``rg_verl/data/shipped_searches``, docs/data.md). Searched from nothing, published in one rename; configs that
read files are skipped.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rg_verl.common.atomic import publish_dir  # noqa: E402
from rg_verl.common.compose import compose  # noqa: E402
from rg_verl.common.names import SPLIT_URI  # noqa: E402
from rg_verl.data import search_cache  # noqa: E402
from rg_verl.data.dataset import ReasoningGymDataset  # noqa: E402

CONFIGS = REPO / "configs"
STAMP = "WITHHELD"


def shipped_configs() -> list[Path]:
    # train_grpo.py's configs: configs/oreo/ trains on collected files, configs/compare/ runs the others
    skip = ("oreo", "compare")
    return sorted(p for p in CONFIGS.rglob("*.yaml") if not p.name.startswith("_") and p.parent.name not in skip)


def reads_files(config) -> bool:
    return any(entry.get("source") is not None for entry in config.data.reasoning_gym.datasets.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.parse_args(argv)
    if os.environ.get("PYTHONHASHSEED") != "0":
        parser.error("run it with PYTHONHASHSEED=0, as training runs are")
    out = search_cache.SHIPPED
    staging = Path(tempfile.mkdtemp(prefix=".shipped_searches.", dir=out.parent))
    os.environ[search_cache.ENV] = str(staging)
    search_cache.SHIPPED = None  # search from nothing: no stored search is trusted
    for path in shipped_configs():
        start = time.perf_counter()
        config = compose(str(path.parent), path.stem, [])
        if reads_files(config):
            print(f"{path.relative_to(CONFIGS)}: reads files, skipped")
            continue
        dataset = ReasoningGymDataset(f"{SPLIT_URI}val", None, config.data)
        for index in range(len(dataset)):
            dataset[index]
        print(f"{path.relative_to(CONFIGS)}: {len(dataset)} items, {time.perf_counter() - start:.1f} s", flush=True)
    # the questions these searches passed over; a fast test compares it with the shipped list
    (staging / STAMP).write_text(search_cache.withheld_digest() + "\n")
    publish_dir(staging, out, replace=True)
    print(f"wrote {len(list(out.glob('*.txt')))} files to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
