"""Calibrates tests/e2e/test_compare.py: N seed sets of the CPU comparison, one line each and a summary.

    python -m tests.compare_calibrate 5 /tmp/compare_calibration

Seed set s collects with ``seed = 42 + s``, trains GRPO with ``data.seed = 1 + s`` and rollout seed ``42 + s``,
and OREO with ``trainer.seed = data.seed = 1 + s`` (seed set 0 is the test's own). Every set starts from the
same warm-started tiny model. Prints the sampled format rate of each row and each row's gain over the start.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.e2e.conftest import COMPARE_CONFIG
from tests.helpers import REPO

ROWS = ("grpo", "rft", "oreo round 1", "oreo round 2")


def run(root: Path, model: Path, s: int) -> dict[str, float]:
    out = root / f"seed{s}"
    train = f"actor_rollout_ref.model.path={model},data.seed={1 + s},actor_rollout_ref.rollout.seed={42 + s}"
    oreo = f"trainer.seed={1 + s},data.seed={1 + s}"
    cmd = [sys.executable, "-m", "rg_verl.cli", "compare", "--config", str(COMPARE_CONFIG), f"out={out}",
           f"seed={42 + s}", f"train.overrides=[{train}]", f"oreo.overrides=[{oreo}]"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(proc.stdout[-3000:] + proc.stderr[-3000:])
    table = json.loads((out / "comparison.json").read_text())["rows"]
    rows = {(r["model"], r["decoding"]): r["metrics"] for r in table}
    start = rows[("start", "sample")]["format_rate"]
    result = {"seed": s, "start": start}
    for name in ROWS:
        result[name] = rows[(name, "sample")]["format_rate"] - start
    result["oreo round 2 value_rerank"] = rows[("oreo round 2", "value_rerank")]["format_rate"] - start
    return result


def main(n: int, root: Path) -> None:
    results = []
    for s in range(n):
        results.append(run(root, root / "model", s))
        print(json.dumps(results[-1]), flush=True)
    for key in results[0]:
        if key != "seed":
            values = [r[key] for r in results]
            print(f"{key:28s} min {min(values):+.3f} mean {sum(values) / len(values):+.3f} max {max(values):+.3f}")


if __name__ == "__main__":
    main(int(sys.argv[1]), Path(sys.argv[2]))
