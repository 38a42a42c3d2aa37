"""rg-verl's V1 trainer: verl's synchronous GRPO trainer plus per-dataset training metrics.

Registered as ``trainer.v1.trainer_mode=rg_verl`` (the default in ``rg_verl_base``). It adds
no training logic of its own: after each step it reads the step's rewards back from verl's
TransferQueue, grouped by ``data_source``, and logs their means next to verl's metrics as
``train/<data_source>/<key>``, where key is ``score`` and every extra value our reward returns.
Training and validation metrics of reasoning-gym datasets also get per-category means
(``.../reasoning_gym/category/<category>/...``, see :mod:`rg_verl.categories`).
"""

import logging
from collections import defaultdict

import numpy as np
import transfer_queue as tq
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

from rg_verl.categories import category_means
from rg_verl.dataset import ReasoningGymDataset

PREFIX = "reasoning_gym/"

logger = logging.getLogger(__name__)

# what the trainer reads back per sample: verl's agent loop keeps the reward function's returned
# dict under extra_fields["reward_extra_info"]
FIELDS = ["data_source", "extra_fields"]


def reward_means(data_sources: list[str], infos: list[dict]) -> dict[str, float]:
    """Per-dataset means of every numeric value the reward returned."""
    names = [name for name, value in infos[0].items() if isinstance(value, (int, float, np.number))] if infos else []
    return grouped_means(data_sources, {name: [info.get(name, np.nan) for info in infos] for name in names})


def grouped_means(data_sources: list[str], values: dict[str, list[float]]) -> dict[str, float]:
    """Mean of each value per data source, keyed ``train/<data_source>/<name>``.

    >>> grouped_means(["a", "a", "b"], {"score": [1.0, 0.0, 1.0]})
    {'train/a/score': 0.5, 'train/b/score': 1.0}
    """
    groups: dict[str, list[int]] = defaultdict(list)
    for i, source in enumerate(data_sources):
        groups[source].append(i)
    metrics = {}
    for source, rows in groups.items():
        for name, column in values.items():
            metrics[f"train/{source}/{name}"] = float(np.mean([float(column[i]) for i in rows]))
    return metrics


@register_trainer("rg_verl")
class ReasoningGymTrainer(PPOTrainerSync):
    """verl's sync trainer, with the step's rewards logged per dataset and per category."""

    def step(self, metrics: dict, timing_raw: dict):
        batch = super().step(metrics, timing_raw)
        data_sources, infos = self.read_rewards(batch)
        reward_metrics = reward_means(data_sources, infos)
        metrics.update(reward_metrics)
        metrics.update(category_means(reward_metrics))
        if isinstance(self.train_dataset, ReasoningGymDataset):
            # the curriculum sees each sample's success; new levels apply from the next batch
            results = defaultdict(list)
            for source, info in zip(data_sources, infos, strict=True):
                if source.startswith(PREFIX):
                    results[source[len(PREFIX) :]].append(float(info.get("accuracy", 0.0)))
            self.train_dataset.update(results)
            metrics.update(self.train_dataset.state.metrics())
        return batch

    def _validate(self) -> dict[str, float]:
        # verl's method: runs validation and returns the metrics dict that the trainer then logs
        metrics = super()._validate()
        return {**metrics, **category_means(metrics)}

    def read_rewards(self, batch) -> tuple[list[str], list[dict]]:
        """Each sample's data source and the dict our reward function returned for it."""
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=FIELDS)
        data_sources = [str(source) for source in list(data["data_source"])]
        infos = [dict(extra or {}).get("reward_extra_info", {}) for extra in list(data["extra_fields"])]
        return data_sources, infos
