"""Calibrates tests/e2e/test_learning_correct.py: GRPO and negated runs of seed sets FIRST .. FIRST+N-1.

    python -m tests.correct_calibrate N DIR [FIRST]

Every run starts from the same warm-started model, DIR/model (built by the first run). Prints one JSON line
per run: its held-out accuracy before the first step and after the last.
"""

import sys
from pathlib import Path

from tests.e2e.test_learning_correct import calibrate

if __name__ == "__main__":
    first = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    calibrate(Path(sys.argv[2]), range(first, first + int(sys.argv[1])))
