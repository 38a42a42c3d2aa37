"""rg_verl.grpo.resume: a run resumes from a complete checkpoint, or stops before Ray with the file and the fix;
an interrupted save is reported and left where it is."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from rg_verl.common.schema import ConfigError
from rg_verl.grpo.resume import TRACKER, check_resume, missing_parts

REPO = Path(__file__).resolve().parents[3]


def save(folder: Path, step: int, world_size: int = 1, skip: tuple[str, ...] = (), data: bool = True) -> Path:
    """A global_step_<step> folder in verl's layout (empty files), without the files named in ``skip``."""
    step_dir = folder / f"global_step_{step}"
    (step_dir / "actor").mkdir(parents=True)
    for kind in ("model", "optim", "extra_state"):
        for rank in range(world_size):
            name = f"{kind}_world_size_{world_size}_rank_{rank}.pt"
            if name not in skip:
                (step_dir / "actor" / name).write_bytes(b"x")
    if data:
        (step_dir / "data.pt").write_bytes(b"x")
    return step_dir


def config(folder: Path, **trainer):
    return OmegaConf.create({"trainer": {"default_local_dir": str(folder), "resume_mode": "auto", **trainer}})


def test_a_complete_tracked_checkpoint_is_resumed_and_a_fresh_folder_starts_from_scratch(tmp_path, caplog):
    assert check_resume(config(tmp_path / "new")) is None
    save(tmp_path, 1)
    save(tmp_path, 2, world_size=2)
    (tmp_path / TRACKER).write_text("2")
    with caplog.at_level(logging.WARNING):
        assert check_resume(config(tmp_path)) == 2
    assert not caplog.records


def test_an_interrupted_save_is_reported_and_left_and_the_last_complete_checkpoint_is_used(tmp_path, caplog):
    save(tmp_path, 1)
    half = save(tmp_path, 2, world_size=2, skip=("optim_world_size_2_rank_1.pt",), data=False)  # killed mid-save
    (tmp_path / TRACKER).write_text("1\n")
    with caplog.at_level(logging.WARNING):
        assert check_resume(config(tmp_path)) == 1
    assert f"{half} is an interrupted save" in caplog.text and "step 1" in caplog.text
    assert (half / "actor" / "model_world_size_2_rank_0.pt").exists()  # left for the user
    assert missing_parts(half) == ["data.pt", "actor/optim_world_size_2_rank_1.pt"]


def test_a_first_save_interrupted_is_reported_and_the_run_starts_from_scratch(tmp_path, caplog):
    save(tmp_path, 3, data=False)
    with caplog.at_level(logging.WARNING):
        assert check_resume(config(tmp_path)) is None
    assert "global_step_3 is an interrupted save" in caplog.text


@pytest.mark.parametrize("text", ["", "2\x00", "step two"])
def test_a_tracker_without_a_step_number_names_the_file_and_the_last_complete_step(tmp_path, text):
    save(tmp_path, 1)
    save(tmp_path, 2, data=False)
    (tmp_path / TRACKER).write_text(text)
    with pytest.raises(ConfigError, match=rf"{TRACKER}: holds .* not a step number .*; write 1 into it"):
        check_resume(config(tmp_path))


def test_a_tracked_checkpoint_that_is_missing_or_incomplete_is_an_error_not_a_fresh_start(tmp_path):
    save(tmp_path, 1)
    (tmp_path / TRACKER).write_text("4")
    with pytest.raises(ConfigError, match=r"\(step 4\): .*global_step_4 does not exist; verl would start from scratch"):
        check_resume(config(tmp_path))
    save(tmp_path, 4, world_size=2, skip=("model_world_size_2_rank_1.pt",))
    with pytest.raises(ConfigError, match=r"global_step_4 is incomplete \(it lacks actor/model_world_size_2_rank_1"):
        check_resume(config(tmp_path))


def test_resume_path_must_be_complete_and_disable_checks_nothing(tmp_path):
    step = save(tmp_path, 5, data=False)
    with pytest.raises(ConfigError, match=r"resume_from_path: .*global_step_5 is incomplete \(it lacks data.pt"):
        check_resume(config(tmp_path, resume_mode="resume_path", resume_from_path=str(step)))
    (step / "data.pt").write_bytes(b"x")
    assert check_resume(config(tmp_path, resume_mode="resume_path", resume_from_path=str(step))) == 5
    (tmp_path / TRACKER).write_text("")
    assert check_resume(config(tmp_path, resume_mode="disable")) is None


def test_a_broken_tracker_stops_the_command_before_ray(tmp_path):
    save(tmp_path / "ckpt", 1)
    (tmp_path / "ckpt" / TRACKER).write_text("")
    proc = subprocess.run(
        [sys.executable, str(REPO / "train_grpo.py"), f"trainer.default_local_dir={tmp_path / 'ckpt'}",
         f"actor_rollout_ref.model.path={tmp_path}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1
    assert f"Invalid config: {tmp_path / 'ckpt' / TRACKER}: holds ''" in proc.stderr
    assert "ray" not in (proc.stdout + proc.stderr).lower().replace("array", "")
