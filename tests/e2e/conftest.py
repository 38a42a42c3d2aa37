"""Session runs that several end-to-end modules read.

``learn_demo`` runs ``make demo``'s command (read from the Makefile) once per session, over the folder of an
earlier demo: GRPO on the learn config for 12 steps, then the start and the trained model evaluated side by side.
``learn_comparison`` then runs ``rg-verl compare --config configs/compare/learn_cpu.yaml`` into the same folder:
the demo is that comparison's GRPO arm (tests/unit/compare/test_config.py checks that the two configs agree), so
the comparison continues with the stages the demo did not run (greedy rows, two OREO rounds, RFT). Its GRPO run
is also tests/e2e/test_learning.py's. These are the suite's most expensive runs, so each is made once.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from itertools import takewhile
from pathlib import Path

import pytest

from tests.helpers import REPO

COMPARE_CONFIG = REPO / "configs" / "compare" / "learn_cpu.yaml"
COMPARE_TIMEOUT_S = 2400
DEMO_TIMEOUT_S = 900
# what an earlier demo left in its folder: every stage marked done, and a file of its own
STALE_STAGES = ("grpo_train", "grpo_convert", "eval_start_sample", "eval_grpo_sample")
STALE_FILE = "from_the_last_demo.txt"


def compare_command(command: str, out: Path, model: Path, *overrides: str) -> list[str]:
    """``rg-verl <command>`` (compare, or oreo iterate) of the CPU comparison into ``out``, from ``model``."""
    head = ["oreo", "iterate"] if command == "iterate" else ["compare"]
    return [sys.executable, "-m", "rg_verl.cli", *head, "--config", str(COMPARE_CONFIG), f"out={out}",
            f"train.overrides=[actor_rollout_ref.model.path={model}]", *overrides]  # fmt: skip


def demo_command() -> list[str]:
    """The command of the Makefile's ``demo`` target (its one line, ``$(BIN)/rg-verl ...``), in this Python."""
    after = (REPO / "Makefile").read_text().split("\ndemo:", 1)[1].splitlines()[1:]
    recipe = [line.strip() for line in takewhile(lambda line: line.startswith("\t"), after)]
    assert len(recipe) == 1 and recipe[0].startswith("$(BIN)/rg-verl "), f"make demo runs {recipe}"
    return [sys.executable, "-m", "rg_verl.cli", *shlex.split(recipe[0])[1:]]


def leave_a_stale_demo(out: Path) -> None:
    """An earlier demo's folder: were the next demo to continue it, it would train and evaluate nothing."""
    (out / "logs").mkdir(parents=True)
    for stage in STALE_STAGES:
        (out / "logs" / f"{stage}.done").write_text("")
    (out / STALE_FILE).write_text("an earlier demo\n")


@pytest.fixture(scope="session")
def learn_demo(tmp_path_factory) -> tuple[Path, Path, str]:
    """(the demo's folder, the warm-started tiny model it built and started from, its console output)."""
    root = tmp_path_factory.mktemp("compare_learn")
    out, model = root / "out", root / "model"
    leave_a_stale_demo(out)
    command = [*demo_command(), f"out={out}", f"train.overrides=[actor_rollout_ref.model.path={model}]"]
    proc = subprocess.run(command, cwd=REPO, env={**os.environ}, capture_output=True, text=True,
                          timeout=DEMO_TIMEOUT_S)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return out, model, proc.stdout


@pytest.fixture(scope="session")
def learn_comparison(learn_demo) -> tuple[Path, Path]:
    """(the comparison's folder, the warm-started tiny model it built and started from)."""
    out, model, _ = learn_demo
    proc = subprocess.run(compare_command("compare", out, model), cwd=REPO, env={**os.environ}, capture_output=True,
                          text=True, timeout=COMPARE_TIMEOUT_S)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return out, model
