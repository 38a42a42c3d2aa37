"""Calibrates the OREO learning check (tests/e2e/test_oreo_learning.py): N seeds, each condition, one table.

    python -m tests.oreo_calibrate 9 /tmp/oreo_calibration

Seed s collects the trajectories with ``--seed 42 + s`` and trains with ``trainer.seed = data.seed = 1 + s``
(seed 0 is the test's own). Prints one JSON line per run and a summary (min, mean, max per measure).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.oreo_helpers import CONDITIONS, LEARN_ITEMS, LEARN_VAL_ITEMS, collect, learning_run


def main(runs: int, root: Path) -> None:
    model = root / "model"
    results = []
    for s in range(runs):
        base = root / f"seed{s}"
        base.mkdir(parents=True, exist_ok=True)
        trajectories = collect(base, base / "trajectories", model, "--train-items", str(LEARN_ITEMS), "--val-items",
                               str(LEARN_VAL_ITEMS), "--seed", str(42 + s))  # fmt: skip
        for condition in CONDITIONS:
            result = learning_run(base / condition, model, trajectories, condition, seed=1 + s)
            result.update(seed=s, condition=condition, gain=result["reward_after"] - result["reward_before"])
            results.append(result)
            print(json.dumps(result), flush=True)
    for condition in CONDITIONS:
        rows = [r for r in results if r["condition"] == condition]
        for key in ("auc_last", "auc_second", "value_gap", "gain"):
            values = [r[key] for r in rows]
            print(f"{condition:9s} {key:10s} min {min(values):+.3f} mean {sum(values) / len(values):+.3f} "
                  f"max {max(values):+.3f}")


if __name__ == "__main__":
    main(int(sys.argv[1]), Path(sys.argv[2]))
