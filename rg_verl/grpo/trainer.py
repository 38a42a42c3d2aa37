"""rg-verl's V1 trainer (``trainer.v1.trainer_mode=rg_verl``): verl's synchronous GRPO trainer plus per-dataset metrics.

A saved step is tracked only once verl has logged it (docs/configs.md, "A run that must stop").
"""

import logging
from collections import defaultdict, deque
from pathlib import Path

from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

from rg_verl.common.atomic import write_atomic
from rg_verl.common.names import source_name
from rg_verl.grpo.console import progress_line
from rg_verl.grpo.metrics import category_means, group_outcomes, reward_means, self_correction_rates
from rg_verl.grpo.resume import TRACKER
from rg_verl.grpo.reward_curve import REWARD_KEY, RewardCurve
from rg_verl.grpo.sampler import CompleteGroupsBuffer, SampledGroup, groups_of, read_rewards

logger = logging.getLogger(__name__)


@register_trainer("rg_verl")
class ReasoningGymTrainer(PPOTrainerSync):
    """verl's sync trainer, with the step's rewards logged per dataset and per category."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        trainer = self.config.trainer
        self.reward_curve = RewardCurve(
            trainer.default_local_dir, title=f"{trainer.project_name}/{trainer.experiment_name}: training reward"
        )
        self.step_seconds: deque[float] = deque(maxlen=10)  # this run's last steps, for the time left
        self.accuracy: float | None = None  # the last step's trained samples' mean accuracy
        self.unlogged_save: int | None = None  # a step saved, not yet logged, and so not yet in the tracker

    def defers_tracker(self) -> bool:
        """Whether a saved step can wait to be tracked: saves are synchronous and keep the tracked one past the next."""
        trainer, actor = self.config.trainer, self.config.actor_rollout_ref.actor
        if (actor.get("checkpoint") or {}).get("async_save", False):
            return False
        keep = [trainer.get("max_actor_ckpt_to_keep"), trainer.get("max_critic_ckpt_to_keep")]  # None or 0: all
        return not trainer.get("remove_previous_ckpt_in_save", False) and all(not k or k >= 2 for k in keep)

    def _save_checkpoint(self):
        # verl's method; the tracker goes back to the last logged step until this one is logged (on_step_begin, fit)
        tracker = Path(self.config.trainer.default_local_dir) / TRACKER
        before = tracker.read_text() if tracker.exists() else None
        super()._save_checkpoint()
        if not self.defers_tracker():
            return
        self.unlogged_save = self.global_steps
        if before is None:
            tracker.unlink(missing_ok=True)
        else:
            write_atomic(tracker, before)

    def track_logged_save(self) -> None:
        """Name the saved step in the tracker, now that verl has logged it."""
        if self.unlogged_save is not None:
            write_atomic(Path(self.config.trainer.default_local_dir) / TRACKER, str(self.unlogged_save))
            self.unlogged_save = None

    def on_step_begin(self):
        # verl's hook: the last step is logged by now
        self.track_logged_save()
        super().on_step_begin()

    def fit(self, *args, **kwargs):
        # verl's loop returns right after logging the last step
        result = super().fit(*args, **kwargs)
        self.track_logged_save()
        return result

    def step(self, metrics: dict, timing_raw: dict):
        batch = super().step(metrics, timing_raw)
        groups = self.sampled_groups(batch)
        trained = [group for group in groups if group.trained]
        data_sources = [group.data_source for group in trained for _ in group.keys]
        infos = [info for group in trained for info in group.infos]
        accuracies = [float(info["accuracy"]) for info in infos if "accuracy" in info]
        self.accuracy = sum(accuracies) / len(accuracies) if accuracies else None
        reward_metrics = {**reward_means(data_sources, infos), **group_outcomes(groups)}
        metrics.update(reward_metrics)
        metrics.update(category_means(reward_metrics))
        # lazy: this module loads in every Ray process, and only the trainer's needs the dataset (and reasoning-gym)
        from rg_verl.data.dataset import ReasoningGymDataset

        if isinstance(self.train_dataset, ReasoningGymDataset):
            # the curriculum sees each sample's success, dropped groups' too; new levels apply from the next batch
            results = defaultdict(list)
            for group in groups:
                name = source_name(group.data_source)
                if name is not None:
                    results[name].extend(group.accuracies)
            self.train_dataset.update(results)
            metrics.update(self.train_dataset.state.metrics())
        return batch

    def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
        # verl's method: fills the step's metrics (critic/score/mean among them) just before it logs them
        super()._compute_metrics(batch, metrics, timing_raw, global_steps, epoch)
        if REWARD_KEY in metrics:
            self.reward_curve.add(global_steps, float(metrics[REWARD_KEY]))
            self.print_progress(global_steps, metrics)

    def print_progress(self, step: int, metrics: dict) -> None:

        self.step_seconds.append(float(metrics.get("timing_s/step", 0.0)) + float(metrics.get("timing_s/testing", 0.0)))
        per_step = sum(self.step_seconds) / len(self.step_seconds)
        left = per_step * max(self.total_training_steps - step, 0)
        reward = float(metrics[REWARD_KEY])
        print(progress_line(step, self.total_training_steps, reward, self.accuracy, per_step, left), flush=True)

    def _validate(self) -> dict[str, float]:
        # verl's method: runs validation and returns the metrics dict that the trainer then logs
        metrics = super()._validate()
        metrics = {**metrics, **self_correction_rates(metrics)}
        return {**metrics, **category_means(metrics)}

    def sampled_groups(self, batch) -> list[SampledGroup]:
        """Every group the step sampled: from rg-verl's replay buffer (dropped ones too), else the trained batch."""
        if isinstance(self.replay_buffer, CompleteGroupsBuffer):
            return self.replay_buffer.take_groups()
        return groups_of(*read_rewards(batch.keys, batch.partition_id))
