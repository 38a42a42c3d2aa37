"""OREO checkpoints: what marks the critic as a value model, what a resume refuses."""

import json
from types import SimpleNamespace

import pytest

from rg_verl.oreo import checkpoints
from rg_verl.oreo.checkpoints import STATE_FILE, ResumeError


class Worker:
    def __init__(self):
        self.saved, self.loaded = [], []

    def save_checkpoint(self, path, global_step=0):
        self.saved.append((path, global_step))
        (__import__("pathlib").Path(path) / "huggingface").mkdir(parents=True, exist_ok=True)

    def load_checkpoint(self, path):
        self.loaded.append(path)


def test_save_marks_the_critic_and_records_the_step(tmp_path):
    actor, critic = Worker(), Worker()
    folder = tmp_path / "global_step_3"

    def save_critic(path, global_step=0):
        Worker.save_checkpoint(critic, path, global_step)
        config = {"architectures": ["Qwen2ForCausalLM"], "num_labels": 1}
        (folder / "critic" / "huggingface" / "config.json").write_text(json.dumps(config))

    critic.save_checkpoint = save_critic
    checkpoints.save(folder, actor, critic, 3, rank=0)
    assert actor.saved == [(str(folder / "actor"), 3)]
    config = json.loads((folder / "critic" / "huggingface" / "config.json").read_text())
    assert config["architectures"] == ["Qwen2ForTokenClassification"]
    assert json.loads((folder / STATE_FILE).read_text()) == {"global_step": 3}
    assert checkpoints.load(folder, actor, critic) == 3
    assert actor.loaded == [str(folder / "actor")] and critic.loaded == [str(folder / "critic")]


@pytest.mark.parametrize("missing", ["actor", "critic", STATE_FILE])
def test_an_incomplete_checkpoint_is_named(tmp_path, missing):
    folder = tmp_path / "global_step_2"
    for part in ("actor", "critic"):
        (folder / part).mkdir(parents=True)
    (folder / STATE_FILE).write_text('{"global_step": 2}')
    target = folder / missing
    target.unlink() if target.is_file() else target.rmdir()
    with pytest.raises(ResumeError, match=f"{missing}: missing.*resume_mode"):
        checkpoints.load(folder, Worker(), Worker())


@pytest.mark.parametrize("text", ["{not json", "{}", '{"global_step": "x"}', "[]"])
def test_a_corrupt_state_is_named(tmp_path, text):
    folder = tmp_path / "global_step_2"
    for part in ("actor", "critic"):
        (folder / part).mkdir(parents=True)
    (folder / STATE_FILE).write_text(text)
    with pytest.raises(ResumeError, match="trainer_state.json: not a trainer state"):
        checkpoints.load(folder, Worker(), Worker())


def test_trajectories_key_changes_with_the_trajectories():
    def t(uid, response):
        return SimpleNamespace(uid=uid, sample_idx=0, prompt_ids=(1, 2), response_ids=response)

    a = checkpoints.trajectories_key([t("train/0", (5, 6)), t("train/1", (7,))])
    assert a == checkpoints.trajectories_key([t("train/0", (5, 6)), t("train/1", (7,))])
    assert a != checkpoints.trajectories_key([t("train/1", (7,)), t("train/0", (5, 6))])
    assert a != checkpoints.trajectories_key([t("train/0", (5, 9)), t("train/1", (7,))])
