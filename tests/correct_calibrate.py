"""Calibrates tests/e2e/test_learning_correct.py: runs of seed sets FIRST .. FIRST+N-1.

    python -m tests.correct_calibrate N DIR [FIRST] [KINDS] [OVERRIDE ...]

KINDS is a comma-separated list of run kinds (default ``grpo,negated``; ``filtered`` is GRPO with group
filtering on the binary outcome); each OVERRIDE (Hydra's key=value) applies to every run.

Every run starts from the same warm-started model, DIR/model (built by the first run). Prints one JSON line
per run: its held-out accuracy before the first step and after the last.
"""

import sys
from pathlib import Path

from tests.e2e.test_learning_correct import calibrate

if __name__ == "__main__":
    first = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    kinds = tuple(sys.argv[4].split(",")) if len(sys.argv) > 4 else ("grpo", "negated")
    calibrate(Path(sys.argv[2]), range(first, first + int(sys.argv[1])), kinds, tuple(sys.argv[5:]))
