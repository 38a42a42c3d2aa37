"""``lm_eval`` runs the tasks of evaluation/lmeh on the tiny model: slow (a subprocess that loads lm-eval).

One run covers reasoning-gym's tasks (gsm8k_cot_rg, llama_math_algebra) and rg-verl's own (gsm8k_rg_verl,
math_algebra_rg_verl), each on two local items: the hub is out of reach, so each task is included with its dataset
replaced by a local file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from rg_verl.cpu.tiny_model import build_tiny_model
from tests.helpers import REPO

pytestmark = pytest.mark.slow

LMEH = REPO / "evaluation" / "lmeh"
GSM8K_LOCAL = [
    {"question": "Tom has 3 apples and buys 2 more. How many apples does he have?", "answer": "3 + 2 = 5\n#### 5"},
    {"question": "A box holds 4 pens. How many pens are in 3 boxes?", "answer": "4 * 3 = 12\n#### 12"},
]
MATH_LOCAL = [
    {
        "problem": "Solve $2x = 1$.",
        "solution": "So $x = \\boxed{\\frac{1}{2}}$.",
        "level": "Level 1",
        "type": "Algebra",
    },
    {"problem": "What is $3 + 4$?", "solution": "It is $\\boxed{7}$.", "level": "Level 1", "type": "Algebra"},
]
# task -> (its local items, the splits its YAML reads, the metrics its results must hold)
TASKS = {
    "gsm8k_cot_rg": (GSM8K_LOCAL, ("test",), ("exact_match,strict-match", "exact_match,flexible-extract")),
    "llama_math_algebra": (MATH_LOCAL, ("train", "test"), ("exact_match,none",)),
    "gsm8k_rg_verl": (GSM8K_LOCAL, ("test",), ("exact_match,none", "exact_match_flexible,none")),
    "math_algebra_rg_verl": (MATH_LOCAL, ("test",), ("exact_match,none", "exact_match_flexible,none")),
}


def _local_tasks(tmp_path) -> list[str]:
    """A task per entry of TASKS that includes ours and reads its items from a local file: their names."""
    folder = tmp_path / "tasks"
    folder.mkdir()
    for name, (items, splits, _) in TASKS.items():
        data = tmp_path / f"{name}.jsonl"
        data.write_text("".join(json.dumps(row) + "\n" for row in items))
        files = "".join(f"    {split}: {data}\n" for split in splits)
        (folder / f"{name}_local.yaml").write_text(
            f"include: {LMEH / (name + '.yaml')}\ntask: {name}_local\ntag: []\n"
            f"dataset_path: json\ndataset_name: null\ndataset_kwargs:\n  data_files:\n{files}"
        )
    return [f"{name}_local" for name in TASKS]


def test_lm_eval_runs_the_reference_and_our_tasks_on_the_tiny_model(tmp_path):
    """``lm_eval --model hf`` with the four tasks of evaluation/lmeh, two local items each."""
    pytest.importorskip("lm_eval")
    tiny_model = build_tiny_model(tmp_path / "tiny")
    names = _local_tasks(tmp_path)
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    command = [
        sys.executable, "-m", "lm_eval", "--model", "hf", "--model_args", f"pretrained={tiny_model},dtype=float32",
        "--include_path", str(tmp_path / "tasks"), "--tasks", ",".join(names), "--apply_chat_template",
        "--gen_kwargs", "max_gen_toks=8", "--device", "cpu", "--batch_size", "2",
        "--output_path", str(tmp_path / "out"),
    ]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    (results_file,) = (tmp_path / "out").rglob("results_*.json")
    report = json.loads(results_file.read_text())
    for name, (items, _, metrics) in TASKS.items():
        results = report["results"][f"{name}_local"]
        assert set(metrics) <= set(results), (name, sorted(results))
        assert all(0.0 <= results[metric] <= 1.0 for metric in metrics), (name, results)
        assert report["n-samples"][f"{name}_local"]["effective"] == len(items)
    # the reference GSM8K task asked for eight shots and sampled as reasoning-gym does
    gsm8k = report["configs"]["gsm8k_cot_rg_local"]
    assert gsm8k["num_fewshot"] == 8
    sampling = {key: gsm8k["generation_kwargs"][key] for key in ("do_sample", "temperature", "top_p")}
    assert sampling == {"do_sample": True, "temperature": 0.6, "top_p": 0.95}
