"""``lm_eval`` runs our GSM8K task (evaluation/lmeh) on the tiny model: slow (a subprocess that loads lm-eval)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from rg_verl.tiny_model import build_tiny_model
from tests.helpers import REPO

pytestmark = pytest.mark.slow

LMEH = REPO / "evaluation" / "lmeh"
GSM8K_LOCAL = [
    {"question": "Tom has 3 apples and buys 2 more. How many apples does he have?", "answer": "3 + 2 = 5\n#### 5"},
    {"question": "A box holds 4 pens. How many pens are in 3 boxes?", "answer": "4 * 3 = 12\n#### 12"},
]


def test_lm_eval_runs_our_gsm8k_task_on_the_tiny_model(tmp_path):
    """``lm_eval --model hf`` with gsm8k_cot_rg on two local items (the hub is out of reach here)."""
    pytest.importorskip("lm_eval")
    tiny_model = build_tiny_model(tmp_path / "tiny")
    data = tmp_path / "gsm8k.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in GSM8K_LOCAL))
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "gsm8k_local.yaml").write_text(
        f"include: {LMEH / 'gsm8k_cot_rg.yaml'}\ntask: gsm8k_cot_rg_local\ntag: []\n"
        f"dataset_path: json\ndataset_name: null\ndataset_kwargs:\n  data_files:\n    test: {data}\n"
    )
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    command = [
        sys.executable, "-m", "lm_eval", "--model", "hf", "--model_args", f"pretrained={tiny_model},dtype=float32",
        "--include_path", str(tasks), "--tasks", "gsm8k_cot_rg_local", "--apply_chat_template",
        "--gen_kwargs", "max_gen_toks=8", "--device", "cpu", "--batch_size", "2",
        "--output_path", str(tmp_path / "out"),
    ]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    (results_file,) = (tmp_path / "out").rglob("results_*.json")
    results = json.loads(results_file.read_text())["results"]["gsm8k_cot_rg_local"]
    assert {"exact_match,none", "exact_match_flexible,none"} <= set(results)
    assert all(0.0 <= results[key] <= 1.0 for key in ("exact_match,none", "exact_match_flexible,none"))
