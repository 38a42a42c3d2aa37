"""The OREO trainer on verl's engines (tests/oreo_probe.py, in its own process): what the losses read is what the
equations need, at the right positions, checked against transformers."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.helpers import REPO
from tests.oreo_helpers import write_synthetic_trajectories

pytestmark = pytest.mark.slow


def test_losses_read_log_probs_and_values_at_the_state_before_each_response_token(tiny_model, tmp_path):
    """OREO's own beam scorer reads the value one position off; here every read is checked against transformers."""
    trajectories = write_synthetic_trajectories(tiny_model, tmp_path / "trajectories")
    result = tmp_path / "result.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.oreo_probe",
            str(tiny_model),
            str(trajectories),
            str(tmp_path / "out"),
            str(result),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    diffs = json.loads(result.read_text())
    assert diffs["actor_vs_hf"] < 1e-4, diffs
    assert diffs["critic_vs_hf"] < 1e-4, diffs
    assert diffs["reads"] == 4 and diffs["loss_reads_vs_infer"] < 1e-5, diffs
    # the joint update (one forward per model per micro-batch) is the separate passes' update
    assert diffs["weights_moved"] > 1e-4, diffs
    assert diffs["joint_vs_separate"] < 1e-5 and diffs["metrics_vs_separate"] < 1e-4, diffs
