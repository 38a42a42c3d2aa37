"""``make demo``: a fresh GRPO run that learns, then the starting and the trained model side by side.

The run is the session's ``learn_demo`` (tests/e2e/conftest.py), made over the folder of an earlier demo. That
the trained model beats the start is tests/e2e/test_compare.py's check, on the same two evaluations.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.e2e.conftest import STALE_FILE
from tests.helpers import read_metrics

pytestmark = pytest.mark.slow

STEPS = 12
ROW = re.compile(r"^\| (start|grpo) \| sample \| (\d+) \| ([\d.]+) \|", re.MULTILINE)


def test_the_demo_starts_afresh_over_an_earlier_demo(learn_demo):
    out, _, _ = learn_demo
    assert not (out / STALE_FILE).exists()
    assert sorted(read_metrics(out / "grpo" / "metrics.jsonl")) == list(range(1, STEPS + 1))
    assert (out / "grpo" / "train" / f"global_step_{STEPS}" / "actor").is_dir()


def test_the_console_shows_a_line_a_training_step(learn_demo):
    _, _, console = learn_demo
    steps = re.findall(r"^\[rg-verl\] step (\d+)/(\d+)  reward -?[\d.]+", console, re.MULTILINE)
    assert steps == [(str(step), str(STEPS)) for step in range(1, STEPS + 1)], console[-3000:]


def test_the_table_holds_the_start_and_the_trained_model_from_their_evaluations(learn_demo):
    out, _, console = learn_demo
    rows = {model: (int(samples), float(rate)) for model, samples, rate in ROW.findall(console)}
    assert set(rows) == {"start", "grpo"}, console[-3000:]
    for model, (samples, rate) in rows.items():
        results = json.loads((out / "eval" / f"{model}_sample" / "results.json").read_text())
        assert samples == (0 if model == "start" else 384)
        assert f"{rate:.1f}" == f"{100 * results['metrics']['format_rate']:.1f}"  # the table's rounding
        assert results["metrics"]["num_completions"] == 32 * 4


def test_the_console_names_the_reward_curve_it_drew(learn_demo):
    out, _, console = learn_demo
    curve = out / "grpo" / "train" / "reward_curve.png"
    assert f"GRPO's training reward, step by step: {curve}" in console
    assert curve.read_bytes()[:4] == b"\x89PNG"
    assert sorted(int(step) for step in json.loads(curve.with_suffix(".json").read_text())) == list(range(1, STEPS + 1))
