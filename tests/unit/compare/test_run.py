"""The comparison's wiring, with every stage faked: which model each round collects with, starts from and keeps
as its reference, what the table's rows are, and that a finished comparison run again runs nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rg_verl.compare import run as compare_run
from rg_verl.compare.config import load
from rg_verl.compare.stages import Stages
from tests.helpers import REPO


def _option(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


def _override(command: list[str], key: str) -> str:
    return next(part.split("=", 1)[1] for part in command if part.startswith(f"{key}="))


@pytest.fixture
def fake_stages(monkeypatch):
    """Stages.run records each command and writes the files the real command would leave."""
    calls: list[tuple[str, list[str]]] = []

    def fake_run(self, name, command, env=None):
        calls.append((name, list(command)))
        if name.endswith("_collect"):
            out = Path(_option(command, "--out"))
            out.mkdir(parents=True, exist_ok=True)
            (out / "manifest.json").write_text('{"complete": true}')
        elif name in ("grpo_train",) or name.startswith("oreo_") and name.endswith("_train"):
            folder = Path(_override(command, "trainer.default_local_dir"))
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "latest_checkpointed_iteration.txt").write_text("3")
            (folder / "global_step_3").mkdir()
        elif name == "rft_train":
            (Path(_option(command, "--out")) / "global_step_5").mkdir(parents=True)
        elif "convert" in name:
            Path(command[-1]).mkdir(parents=True, exist_ok=True)
            (Path(command[-1]) / "config.json").write_text("{}")
        elif name.startswith("eval_"):
            folder = Path(_option(command, "--output-dir")) / _option(command, "--run-name")
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "results.json").write_text(json.dumps({"metrics": {"format_rate": 0.5, "accuracy": 0.25}}))

    monkeypatch.setattr(Stages, "run", fake_run)
    monkeypatch.setattr(compare_run, "ensure_model", lambda config: None)
    return calls


def test_rounds_chain_their_models_and_keep_the_start_as_reference(tmp_path, fake_stages):
    config = load(REPO / "configs" / "compare" / "learn_cpu.yaml", [f"out={tmp_path}", "oreo.rounds=2"])
    comparison = compare_run.Comparison(config)
    table = comparison.run()
    names = [name for name, _ in fake_stages]
    assert names[:2] == ["grpo_train", "grpo_convert"]
    commands = dict(fake_stages)
    start = comparison.start
    first, second = commands["oreo_1_train"], commands["oreo_2_train"]
    assert _option(commands["oreo_1_collect"], "--model-path") == start
    assert _option(commands["oreo_2_collect"], "--model-path") == str(tmp_path / "oreo" / "round_1" / "actor_hf")
    assert [_option(commands[f"oreo_{r}_collect"], "--seed") for r in (1, 2)] == ["42", "43"]
    assert _option(commands["oreo_1_collect"], "--train-items") == "24"  # 384 samples / 2 rounds / 8 per item
    assert "reasoning_gym.val_size=32" in commands["oreo_1_collect"]  # the learn config has 8; 32 are held out
    assert _override(first, "oreo.reference") == "actor_init" and _override(first, "oreo.zero_value_head") == "true"
    assert _override(second, "oreo.reference") == start  # reference: start
    assert _override(second, "actor.model.path") == str(tmp_path / "oreo" / "round_1" / "actor_hf")
    assert _override(second, "critic.model.path") == str(tmp_path / "oreo" / "round_1" / "critic_hf")
    assert _override(second, "oreo.zero_value_head") == "false"
    assert _option(commands["rft_train"], "--trajectories") == str(tmp_path / "oreo/round_1/trajectories/train")
    assert _override(commands["grpo_train"], "trainer.total_training_steps") == "12"
    rows = json.loads((tmp_path / "comparison.json").read_text())["rows"]
    labels = [(row["model"], row["decoding"]) for row in rows]
    assert labels[:3] == [("start", "sample"), ("start", "greedy"), ("grpo", "sample")]
    assert ("oreo round 2", "value_rerank") in labels and ("grpo", "value_rerank") not in labels
    assert [row["samples"] for row in rows if row["model"] == "oreo round 2"][0] == 384  # both rounds' samples
    assert _option(commands["eval_grpo_greedy"], "--temperature") == "0"
    assert table.read_text().count("\n| ") == len(rows) + 2  # the header, its rule, the rows

    fake_stages.clear()  # everything is done: a second run only writes the report
    compare_run.Comparison(config).run()
    assert fake_stages == []


def test_reference_previous_uses_each_rounds_own_start(tmp_path, fake_stages):
    overrides = [f"out={tmp_path}", "oreo.rounds=2", "oreo.reference=previous", "methods=[oreo]"]
    compare_run.Comparison(load(REPO / "configs" / "compare" / "learn_cpu.yaml", overrides)).run()
    commands = dict(fake_stages)
    assert _override(commands["oreo_2_train"], "oreo.reference") == "actor_init"
    assert "grpo_train" not in commands and "rft_train" not in commands


def test_a_training_stage_that_left_no_checkpoint_is_named(tmp_path, fake_stages, monkeypatch):
    from rg_verl.compare.stages import StageError

    real = Stages.run

    def no_checkpoint(self, name, command, env=None):
        if name != "oreo_1_train":
            real(self, name, command, env)

    monkeypatch.setattr(Stages, "run", no_checkpoint)
    config = load(REPO / "configs" / "compare" / "learn_cpu.yaml", [f"out={tmp_path}", "methods=[oreo]"])
    with pytest.raises(StageError, match=r"stage oreo_1_train left no checkpoint .*oreo_1_train\.log"):
        compare_run.Comparison(config).run()
