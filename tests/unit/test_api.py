"""rg_verl.api: the commands' code from Python (rg_verl.train, rg_verl.evaluate; rg_verl.convert is tested with the
converter, tests/unit/checkpoint/test_checkpoint.py)."""

import json
import subprocess
import sys

import pytest

import rg_verl
from rg_verl.api import compose
from rg_verl.common.schema import ConfigError
from tests.helpers import REPO


def test_importing_the_package_imports_nothing_heavy():
    code = "import sys, rg_verl; print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'verl', 'hydra')))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "[]\n"


def test_compose_finds_the_config_as_the_command_does(tmp_path, monkeypatch):
    default = compose(overrides=["trainer.total_training_steps=7"])
    assert default.trainer.experiment_name == "cpu" and default.trainer.total_training_steps == 7
    monkeypatch.chdir(tmp_path)  # a relative folder is looked up in the working directory, then the repository
    inter = compose("algorithmic_qwen3_4b", "configs/inter_generalisation")
    assert inter.actor_rollout_ref.model.path == "Qwen/Qwen3-4B-Thinking-2507"
    assert compose("algorithmic_qwen3_4b", str(REPO / "configs" / "inter_generalisation")) == inter
    with pytest.raises(FileNotFoundError, match="config folder 'configs/nowhere' not found"):
        compose("cpu", "configs/nowhere")


def test_train_checks_before_anything_runs(capsys):
    rg_verl.train(overrides=["+dry_run=true"])  # our checks, then sample items; no Ray
    assert "chain_sum" in capsys.readouterr().out
    with pytest.raises(ConfigError, match="reasoning_gym.datasets"):
        rg_verl.train(overrides=["+reasoning_gym.datasets.no_such_dataset.weight=1", "+dry_run=true"])


def test_evaluate_takes_a_path_or_a_dict_with_the_commands_overrides(tmp_path):
    from rg_verl.cpu.tiny_model import build_tiny_model

    model = build_tiny_model(tmp_path / "tiny")
    path = REPO / "evaluation" / "configs" / "smoke.yaml"
    run_dir = rg_verl.evaluate(path, model_path=str(model), output_dir=str(tmp_path / "runs"), max_tokens=4)
    results = json.loads((run_dir / "results.json").read_text())
    metadata = results["metadata"]
    assert run_dir.parent == tmp_path / "runs" and (metadata["model"], metadata["max_tokens"]) == (str(model), 4)
    datasets = [{"dataset": "chain_sum", "size": 2}]
    fields = {"model_path": str(model), "backend": "hf", "device": "cpu", "max_tokens": 4, "output_dir": str(tmp_path),
              "categories": [{"category": "arithmetic", "datasets": datasets}]}  # fmt: skip
    run_dir = rg_verl.evaluate(fields, run_name="from_a_dict")
    assert run_dir == tmp_path / "from_a_dict" and (run_dir / "items.jsonl").read_text().count("\n") == 2
