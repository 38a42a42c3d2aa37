"""What the end-to-end tests share across modules: the comparison on the learnable CPU task.

``learn_comparison`` runs ``rg-verl compare --config configs/compare/learn_cpu.yaml`` once per session: GRPO
(the learn config's 12 steps, which tests/e2e/test_learning.py also reads as its GRPO run), two OREO rounds,
RFT, and the evaluator on every model. It is the suite's most expensive run, so it is made once.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

COMPARE_CONFIG = REPO / "configs" / "compare" / "learn_cpu.yaml"
COMPARE_TIMEOUT_S = 2400


def compare_command(command: str, out: Path, model: Path, *overrides: str) -> list[str]:
    """``rg-verl <command>`` (compare, or oreo iterate) of the CPU comparison into ``out``, from ``model``."""
    head = ["oreo", "iterate"] if command == "iterate" else ["compare"]
    return [sys.executable, "-m", "rg_verl.cli", *head, "--config", str(COMPARE_CONFIG), f"out={out}",
            f"train.overrides=[actor_rollout_ref.model.path={model}]", *overrides]  # fmt: skip


@pytest.fixture(scope="session")
def learn_comparison(tmp_path_factory) -> tuple[Path, Path]:
    """(the comparison's folder, the warm-started tiny model it built and started from)."""
    root = tmp_path_factory.mktemp("compare_learn")
    out, model = root / "out", root / "model"
    proc = subprocess.run(compare_command("compare", out, model), cwd=REPO, env={**os.environ}, capture_output=True,
                          text=True, timeout=COMPARE_TIMEOUT_S)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return out, model
