"""rg_verl.grpo.trainer with verl's parent methods stubbed.

The step and validation hooks add our metrics; ``__init__`` creates the run's reward curve and the
``_compute_metrics`` hook adds each step's ``critic/score/mean`` to it.
"""

import json

import numpy as np
import pytest

V = "val-core/reasoning_gym"
T = "train/reasoning_gym"


@pytest.fixture
def trainer(monkeypatch):
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    from rg_verl.grpo.sampler import groups_of
    from rg_verl.grpo.trainer import ReasoningGymTrainer

    val = {f"{V}/chain_sum/reward/mean@1": 1.0, f"{V}/products/reward/mean@1": 0.0, "val-aux/num_turns/min": 2}
    monkeypatch.setattr(PPOTrainerSync, "_validate", lambda self: dict(val))
    monkeypatch.setattr(PPOTrainerSync, "step", lambda self, metrics, timing_raw: "batch")
    sources = ["reasoning_gym/chain_sum", "reasoning_gym/maze", "reasoning_gym/maze"]
    infos = [{"score": 1.0, "accuracy": 1.0}, {"score": 1.0, "accuracy": 1.0}, {"score": 0.0, "accuracy": 0.0}]
    keys = ["u1_0_0", "u2_0_0", "u2_1_0"]  # verl's trajectory keys: one chain_sum group, one maze group of two
    monkeypatch.setattr(ReasoningGymTrainer, "sampled_groups", lambda self, batch: groups_of(keys, sources, infos))
    trainer = ReasoningGymTrainer.__new__(ReasoningGymTrainer)  # no verl setup needed for these methods
    trainer.train_dataset = None  # not a reasoning-gym dataset: no curriculum
    return trainer


def test_trainer_validate_adds_category_means(trainer):
    assert trainer._validate() == {
        f"{V}/chain_sum/reward/mean@1": 1.0,
        f"{V}/products/reward/mean@1": 0.0,
        "val-aux/num_turns/min": 2,
        f"{V}/category/arithmetic/reward/mean@1": 0.5,
    }


def test_trainer_step_adds_category_means(trainer):
    metrics = {"timing_s/gen": 1.0}
    assert trainer.step(metrics, {}) == "batch"
    assert metrics == {
        "timing_s/gen": 1.0,
        f"{T}/chain_sum/score": 1.0,
        f"{T}/maze/score": 0.5,
        f"{T}/chain_sum/accuracy": 1.0,
        f"{T}/maze/accuracy": 0.5,
        f"{T}/chain_sum/groups/all_correct": 1.0,
        f"{T}/chain_sum/groups/all_wrong": 0.0,
        f"{T}/maze/groups/all_correct": 0.0,  # one right and one wrong answer: the group has an advantage
        f"{T}/maze/groups/all_wrong": 0.0,
        f"{T}/category/arithmetic/score": 1.0,
        f"{T}/category/games/score": 0.5,
        f"{T}/category/arithmetic/accuracy": 1.0,
        f"{T}/category/games/accuracy": 0.5,
        f"{T}/category/arithmetic/groups/all_correct": 1.0,
        f"{T}/category/arithmetic/groups/all_wrong": 0.0,
        f"{T}/category/games/groups/all_correct": 0.0,
        f"{T}/category/games/groups/all_wrong": 0.0,
    }


@pytest.fixture
def built(monkeypatch, tmp_path):
    """A trainer made through its own ``__init__``, verl's stubbed: (trainer, what verl's methods were given)."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    from rg_verl.grpo.trainer import ReasoningGymTrainer

    calls = {"init": [], "metrics": []}

    def init(self, config):
        calls["init"].append(config)
        self.config = config
        self.total_training_steps = 4

    def compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
        calls["metrics"].append((batch, dict(metrics), timing_raw, global_steps, epoch))
        if global_steps in REWARDS:  # verl logs critic/score/mean on every step that scored a batch
            metrics["critic/score/mean"] = REWARDS[global_steps]
        metrics["timing_s/step"] = 1.0

    monkeypatch.setattr(PPOTrainerSync, "__init__", init)
    monkeypatch.setattr(PPOTrainerSync, "_compute_metrics", compute_metrics)
    trainer = {"default_local_dir": str(tmp_path / "out"), "project_name": "proj", "experiment_name": "exp"}
    config = OmegaConf.create({"trainer": trainer})
    return ReasoningGymTrainer(config), calls


# step -> the critic/score/mean that the stubbed verl method logs (numpy's float, as verl's reductions give)
REWARDS = {1: np.float32(0.25), 2: 0.5, 4: np.float64(0.75)}


def test_init_runs_verls_and_creates_the_reward_curve_in_the_runs_folder(built, tmp_path):
    trainer, calls = built
    assert calls["init"] == [trainer.config]
    curve = trainer.reward_curve
    assert curve.out_dir == tmp_path / "out" and curve.title == "proj/exp: training reward"
    assert not (tmp_path / "out").exists()  # nothing is written before the first step


def test_compute_metrics_adds_each_steps_reward_to_the_curve_and_prints_progress(built, tmp_path, capsys):
    from rg_verl.grpo.reward_curve import RewardCurve

    trainer, calls = built
    out = tmp_path / "out"
    for step in (1, 2, 3, 4):
        metrics = {"actor/loss": 0.1}
        # as verl's fit loop calls it
        trainer._compute_metrics(f"batch{step}", metrics, {"gen": 1.0}, global_steps=step, epoch=0)
        assert metrics["timing_s/step"] == 1.0 and metrics["actor/loss"] == 0.1  # verl's metrics kept
        saved = json.loads((out / RewardCurve.JSON).read_text())
        assert saved == {str(s): float(REWARDS[s]) for s in REWARDS if s <= step}  # step 3 logged no reward
    assert calls["metrics"] == [(f"batch{s}", {"actor/loss": 0.1}, {"gen": 1.0}, s, 0) for s in (1, 2, 3, 4)]
    assert (out / RewardCurve.PNG).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # a progress line for each step that logged a reward (1 s a step, with no step's accuracy read)
    assert capsys.readouterr().out.splitlines() == [
        "[rg-verl] step 1/4  reward 0.250  accuracy n/a  1.0 s/step  0:00:03 left",
        "[rg-verl] step 2/4  reward 0.500  accuracy n/a  1.0 s/step  0:00:02 left",
        "[rg-verl] step 4/4  reward 0.750  accuracy n/a  1.0 s/step  0:00:00 left",
    ]


def test_a_resumed_trainer_continues_the_saved_curve(built, tmp_path):
    from rg_verl.grpo.reward_curve import RewardCurve

    trainer, _ = built
    out = tmp_path / "out"
    out.mkdir()
    # an earlier run saved steps 1 to 5; resumed from the checkpoint of step 3, it logs step 4 again
    (out / RewardCurve.JSON).write_text(json.dumps({str(s): s / 10 for s in range(1, 6)}))
    trainer._compute_metrics("batch", {}, {}, global_steps=4, epoch=1)
    assert json.loads((out / RewardCurve.JSON).read_text()) == {"1": 0.1, "2": 0.2, "3": 0.3, "4": 0.75}


class Dataset:
    """What the trainer's curriculum hook calls: ``update`` with each dataset's results, then ``state.metrics``."""

    def __init__(self):
        self.results = []
        self.state = self

    def update(self, results):
        self.results.append(dict(results))

    def metrics(self):
        return {"curriculum/maze/level": 1.0}


def test_dropped_groups_reach_the_group_shares_and_the_curriculum_but_not_the_reward_means(monkeypatch):
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    from rg_verl.data import dataset
    from rg_verl.grpo import trainer as module
    from rg_verl.grpo.sampler import CompleteGroupsBuffer, groups_of

    monkeypatch.setattr(PPOTrainerSync, "step", lambda self, metrics, timing_raw: "batch")
    monkeypatch.setattr(dataset, "ReasoningGymDataset", Dataset)  # the trainer imports it when it steps
    right, wrong = {"score": 1.0, "accuracy": 1.0}, {"score": 0.0, "accuracy": 0.0}
    groups = groups_of(["a_0_0", "a_1_0", "b_0_0", "b_1_0"], ["reasoning_gym/maze"] * 4, [right, wrong, right, right])
    groups[1].trained = False  # all right: the filter dropped it
    buffer = CompleteGroupsBuffer.__new__(CompleteGroupsBuffer)
    buffer.sampled = groups
    trainer = module.ReasoningGymTrainer.__new__(module.ReasoningGymTrainer)
    trainer.replay_buffer, trainer.train_dataset = buffer, Dataset()
    metrics = {}
    trainer.step(metrics, {})
    assert metrics[f"{T}/maze/score"] == 0.5  # the trained group only
    assert metrics[f"{T}/maze/groups/all_correct"] == 0.5  # one of the two sampled groups
    assert trainer.train_dataset.results == [{"maze": [1.0, 0.0, 1.0, 1.0]}]
    assert metrics["curriculum/maze/level"] == 1.0
    assert trainer.accuracy == 0.5  # the progress line's: the trained group's samples
    assert buffer.sampled == []  # taken once


def test_the_modules_every_ray_process_imports_leave_reasoning_gym_out():
    """verl imports a run's plugin modules (``VERL_USE_EXTERNAL_MODULES``) in each of its Ray processes, most of
    which never read an item; reasoning-gym (about a CPU-second to import) loads only where it is used."""
    import subprocess
    import sys

    from rg_verl.grpo.launch import plugin_modules
    from tests.helpers import CONFIGS_DIR
    from tests.unit.test_shipped_configs import composed

    config = composed(CONFIGS_DIR / "smoke" / "cpu.yaml", ("actor_rollout_ref.rollout.name=hf",))
    modules = plugin_modules(config)
    assert "rg_verl.grpo.trainer" in modules and "rg_verl.hf_rollout" in modules
    imports = "; ".join(f"import {module}" for module in modules)
    code = f"import sys; {imports}; print('reasoning_gym' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "False"


def saving_trainer(monkeypatch, tmp_path, **trainer_keys):
    """A trainer whose verl save writes the step's folder and then the tracker, as verl 0.9.1's does."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    from rg_verl.grpo.trainer import ReasoningGymTrainer

    def save(self):
        (tmp_path / f"global_step_{self.global_steps}").mkdir()
        (tmp_path / "latest_checkpointed_iteration.txt").write_text(str(self.global_steps))

    monkeypatch.setattr(PPOTrainerSync, "_save_checkpoint", save)
    monkeypatch.setattr(PPOTrainerSync, "fit", lambda self, manager: "fitted")
    trainer = ReasoningGymTrainer.__new__(ReasoningGymTrainer)
    trainer.config = OmegaConf.create({"trainer": {"default_local_dir": str(tmp_path), **trainer_keys},
                                       "actor_rollout_ref": {"actor": {"checkpoint": {}}}})  # fmt: skip
    trainer.unlogged_save = None
    return trainer


def test_a_saved_step_is_tracked_only_once_it_is_logged(monkeypatch, tmp_path):
    trainer = saving_trainer(monkeypatch, tmp_path)
    tracker = tmp_path / "latest_checkpointed_iteration.txt"
    trainer.global_steps = 1
    trainer._save_checkpoint()
    assert (tmp_path / "global_step_1").is_dir() and not tracker.exists()  # saved, not logged: a rerun starts afresh
    trainer.on_step_begin()  # verl logged step 1 before it begins step 2
    assert tracker.read_text() == "1"
    trainer.global_steps = 2
    trainer._save_checkpoint()
    assert tracker.read_text() == "1"  # a run stopped now resumes from step 1 and trains step 2 again
    assert trainer.fit(None) == "fitted" and tracker.read_text() == "2"  # verl's loop returns after the last log


def test_a_stop_before_the_log_leaves_the_last_logged_step_tracked(monkeypatch, tmp_path):
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    trainer = saving_trainer(monkeypatch, tmp_path)
    tracker = tmp_path / "latest_checkpointed_iteration.txt"
    trainer.global_steps = 1
    trainer._save_checkpoint()
    trainer.on_step_begin()
    trainer.global_steps = 2

    def stopped(self, manager):
        self._save_checkpoint()
        raise KeyboardInterrupt  # the run stops between the save of step 2 and its log

    monkeypatch.setattr(PPOTrainerSync, "fit", stopped)
    with pytest.raises(KeyboardInterrupt):
        trainer.fit(None)
    assert tracker.read_text() == "1"


@pytest.mark.parametrize(
    ("keys", "defers"),
    [({}, True), ({"max_actor_ckpt_to_keep": 2}, True), ({"max_actor_ckpt_to_keep": 1}, False),
     ({"max_critic_ckpt_to_keep": 1}, False), ({"remove_previous_ckpt_in_save": True}, False)],
)  # fmt: skip
def test_the_tracker_waits_only_where_the_tracked_checkpoint_survives_the_next_save(
    monkeypatch, tmp_path, keys, defers
):
    trainer = saving_trainer(monkeypatch, tmp_path, **keys)
    assert trainer.defers_tracker() is defers
    trainer.global_steps = 3
    trainer._save_checkpoint()
    assert (tmp_path / "latest_checkpointed_iteration.txt").exists() is not defers


def test_asynchronous_saves_are_left_to_verl(monkeypatch, tmp_path):
    trainer = saving_trainer(monkeypatch, tmp_path)
    trainer.config.actor_rollout_ref.actor.checkpoint = {"async_save": True}
    assert not trainer.defers_tracker()
