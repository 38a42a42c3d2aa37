"""``rg-verl compare`` and ``rg-verl oreo iterate`` on the learnable CPU task (configs/compare/learn_cpu.yaml):
GRPO, two OREO rounds and RFT from the warm-started tiny model with 384 generated samples each, evaluated on
held-out items; the learnable reward is the strict format, so ``format_rate`` is what learning moves.

Thresholds: see the constants, calibrated with ``python -m tests.compare_calibrate N DIR`` (seed set s collects
with seed 42 + s and trains GRPO and OREO with seeds 1 + s; seed set 0 is this test's own run).
"""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.e2e.conftest import compare_command
from tests.helpers import REPO

pytestmark = pytest.mark.slow

MODELS = ("start", "grpo", "rft", "oreo round 1", "oreo round 2")
# Gains of the sampled format rate over the start's (0.20-0.27), over 6 seed sets (min / mean / max):
#   grpo          +0.39 / +0.55 / +0.66
#   oreo round 2  +0.22 / +0.30 / +0.37     (round 1: +0.16 / +0.20 / +0.29; value_rerank: +0.24 / +0.34 / +0.41)
#   rft           +0.05 / +0.14 / +0.17     (not asserted)
# One row's rate is a mean of 128 sampled completions (sd about 0.04; a gain's about 0.055).
# At GRPO's learning rate 1e-3 (configs/smoke/learn.yaml; the rows above were at 2e-3, where one CI run gained only
# +0.195), 6 seed sets gave grpo +0.41 / +0.47 / +0.53, oreo round 2 +0.27 / +0.35 / +0.41, rft +0.08 / +0.16 / +0.30.
MIN_GRPO_GAIN = 0.2
MIN_OREO_GAIN = 0.1


def rows(out, name="comparison"):
    return {(r["model"], r["decoding"]): r for r in json.loads((out / f"{name}.json").read_text())["rows"]}


def test_one_row_per_model_and_decoding_and_value_rows_only_for_oreo(learn_comparison):
    out, _ = learn_comparison
    table = rows(out)
    expected = {(m, d) for m in MODELS for d in ("sample", "greedy")} | {
        ("oreo round 1", "value_rerank"), ("oreo round 2", "value_rerank")
    }  # fmt: skip
    assert set(table) == expected
    assert {table[(m, "sample")]["samples"] for m in MODELS} == {0, 384, 192}
    assert (out / "comparison.png").read_bytes()[:4] == b"\x89PNG"
    markdown = (out / "comparison.md").read_text()
    assert markdown.count("\n| ") == len(table) + 2
    for row in table.values():
        results = json.loads((REPO / row["results"]).read_text())
        assert results["metrics"]["num_completions"] == 32 * 4  # 32 held-out items, 4 completions each


def test_grpo_and_oreo_beat_the_start_on_the_learnable_reward(learn_comparison):
    out, _ = learn_comparison
    table = rows(out)
    start = table[("start", "sample")]["metrics"]["format_rate"]
    gains = {m: table[(m, "sample")]["metrics"]["format_rate"] - start for m in MODELS[1:]}
    print(f"format rate of the start {start:.3f}; gains {({m: round(g, 3) for m, g in gains.items()})}")
    assert gains["grpo"] >= MIN_GRPO_GAIN, gains
    assert gains["oreo round 2"] >= MIN_OREO_GAIN, gains


def test_round_two_collected_with_round_ones_policy_and_kept_the_start_as_reference(learn_comparison):
    out, model = learn_comparison
    manifest = json.loads((out / "oreo" / "round_2" / "trajectories" / "manifest.json").read_text())
    assert manifest["model_path"] == str(out / "oreo" / "round_1" / "actor_hf")
    log = (out / "logs" / "oreo_2_train.log").read_text().splitlines()[0]
    assert f"oreo.reference={model}" in log and "oreo.zero_value_head=false" in log


def test_iterate_on_a_finished_run_reruns_nothing_and_tables_the_rounds(learn_comparison):
    out, model = learn_comparison
    logs = sorted((p.name, p.stat().st_mtime) for p in (out / "logs").iterdir())
    proc = subprocess.run(compare_command("iterate", out, model), cwd=REPO, capture_output=True, text=True,
                          timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert sorted((p.name, p.stat().st_mtime) for p in (out / "logs").iterdir()) == logs
    assert {m for m, _ in rows(out, "rounds")} == {"start", "oreo round 1", "oreo round 2"}
    assert "# OREO rounds" in proc.stdout
