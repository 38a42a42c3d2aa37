"""A comparison's stages: a failing command names its stage and log, and a begun collection resumes."""

from __future__ import annotations

import sys

import pytest

from rg_verl.compare.stages import StageError, Stages, latest_step


def test_a_failed_stage_names_itself_its_status_and_its_log(tmp_path):
    stages = Stages(tmp_path, "cpu")
    with pytest.raises(StageError, match=r"stage broken failed \(exit status 3\); its log is .*broken\.log") as error:
        stages.run("broken", [sys.executable, "-c", "print('what went wrong'); raise SystemExit(3)"])
    assert "what went wrong" in str(error.value)
    assert "what went wrong" in (tmp_path / "logs" / "broken.log").read_text()


def test_a_stage_logs_its_command_and_output(tmp_path):
    Stages(tmp_path, "cpu").run("fine", [sys.executable, "-c", "print('hello')"])
    log = (tmp_path / "logs" / "fine.log").read_text()
    assert log.startswith("$ ") and "hello" in log


def test_latest_step_reads_verls_tracker(tmp_path):
    assert latest_step(tmp_path) is None
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("12\n")
    assert latest_step(tmp_path) == 12
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("garbage")
    assert latest_step(tmp_path) is None


def test_gpus_launch_under_torchrun_and_a_cpu_in_this_python(tmp_path):
    assert Stages(tmp_path, "cpu").launcher() == [sys.executable]
    assert Stages(tmp_path, "cuda", 4).launcher()[1:] == ["-m", "torch.distributed.run", "--standalone",
                                                          "--nproc-per-node=4"]  # fmt: skip


def test_a_begun_collection_is_resumed_and_a_complete_one_skipped(tmp_path, monkeypatch):
    stages, calls = Stages(tmp_path, "cpu"), []
    monkeypatch.setattr(stages, "run", lambda name, command, env=None: calls.append(command))
    out = tmp_path / "trajectories"
    stages.collect("c", out, ["--config-name", "learn"], ["--samples", "2"])
    assert "--resume" not in calls[-1]
    out.mkdir()
    (out / "manifest.json").write_text('{"complete": false}')
    stages.collect("c", out, [], [])
    assert calls[-1][-1] == "--resume"
    (out / "manifest.json").write_text('{"complete": true}')
    stages.collect("c", out, [], [])
    assert len(calls) == 2


def test_a_stage_shows_its_progress_lines_and_logs_everything(tmp_path, capsys):
    script = "print('verl says a lot'); print('(TaskRunner pid=7) [rg-verl] step 1/2  reward 0.500'); print('more')"
    Stages(tmp_path, "cpu").run("train", [sys.executable, "-c", script])
    assert capsys.readouterr().out == "[rg-verl] step 1/2  reward 0.500\n"
    log = (tmp_path / "logs" / "train.log").read_text()
    assert "verl says a lot" in log and "(TaskRunner pid=7) [rg-verl] step 1/2" in log and "more" in log
