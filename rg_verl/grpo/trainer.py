"""rg-verl's V1 trainer: verl's synchronous GRPO trainer plus per-dataset training metrics.

Registered as ``trainer.v1.trainer_mode=rg_verl`` (the default in ``rg_verl_base``). It adds
no training logic of its own: after each step it reads the step's rewards back from verl's
TransferQueue, grouped by ``data_source``, and logs their means next to verl's metrics as
``train/<data_source>/<key>``, where key is ``score`` and every extra value our reward returns.
Training and validation metrics of reasoning-gym datasets also get per-category means
(``.../reasoning_gym/category/<category>/...``, see :mod:`rg_verl.grpo.metrics`).

Validation also reports the self-correction rate of each data source,
``val-aux/<data_source>/self_correction_rate/mean@N`` (see :func:`self_correction_rates`); the
revision rate is verl's own ``val-aux/<data_source>/revised/mean@N``.

After each step it also draws the training reward curve, verl's logged ``critic/score/mean`` per
step, into ``trainer.default_local_dir``: ``reward_curve.png`` (see :mod:`rg_verl.grpo.reward_curve`), with
the values in ``reward_curve.json`` so that a resumed run continues the curve.
"""

import json
import logging
import os
import re
from collections import defaultdict

import numpy as np
import transfer_queue as tq
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

from rg_verl.data.dataset import ReasoningGymDataset
from rg_verl.grpo.metrics import category_means
from rg_verl.grpo.reward_curve import REWARD_KEY, plot_reward_curve
from rg_verl.vocab import source_name

# written into trainer.default_local_dir after every step
REWARD_CURVE_PNG = "reward_curve.png"
REWARD_CURVE_JSON = "reward_curve.json"

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


_REVISED = re.compile(r"^(val-aux/.+)/revised/(mean@\d+)$")


def self_correction_rates(metrics: dict) -> dict[str, float]:
    """Among validation responses that revised their answer, the share that self-corrected.

    verl reports, per data source, the means of our reward's per-response ``revised`` and
    ``self_corrected`` flags (``rg_verl.reward.terms.revised_answers`` has the rule). Every
    self-corrected response revised, and verl's ``mean@N`` is the mean over the same responses
    for both, so their ratio is the conditional rate. Sources where nothing revised get no key.

    >>> self_correction_rates({"val-aux/math/gsm8k/revised/mean@1": 0.25,
    ...                        "val-aux/math/gsm8k/self_corrected/mean@1": 0.1})
    {'val-aux/math/gsm8k/self_correction_rate/mean@1': 0.4}
    """
    rates = {}
    for key, revised in metrics.items():
        match = _REVISED.match(key)
        corrected = metrics.get(f"{match[1]}/self_corrected/{match[2]}") if match else None
        if corrected is not None and revised > 0:
            rates[f"{match[1]}/self_correction_rate/{match[2]}"] = float(corrected) / float(revised)
    return rates


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
                name = source_name(source)
                if name is not None:
                    results[name].append(float(info.get("accuracy", 0.0)))
            self.train_dataset.update(results)
            metrics.update(self.train_dataset.state.metrics())
        return batch

    def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
        # verl's method: fills the step's metrics (critic/score/mean among them) just before it logs them
        super()._compute_metrics(batch, metrics, timing_raw, global_steps, epoch)
        if REWARD_KEY in metrics:
            self.record_reward(global_steps, float(metrics[REWARD_KEY]))

    def record_reward(self, step: int, reward: float) -> None:
        """Add a step's mean reward to the curve and redraw it; a failure only logs a warning."""
        out_dir = self.config.trainer.default_local_dir
        try:
            history = getattr(self, "_reward_history", None)
            if history is None:  # first step of this process: continue the curve of a resumed run
                history = {}
                saved = os.path.join(out_dir, REWARD_CURVE_JSON)
                if os.path.isfile(saved):
                    with open(saved) as f:
                        history = {int(k): v for k, v in json.load(f).items() if int(k) < step}
                self._reward_history = history
            history[step] = reward
            os.makedirs(out_dir, exist_ok=True)
            with open(os.path.join(out_dir, REWARD_CURVE_JSON), "w") as f:
                json.dump({str(k): v for k, v in sorted(history.items())}, f)
            title = f"{self.config.trainer.project_name}/{self.config.trainer.experiment_name}: training reward"
            plot_reward_curve(history, os.path.join(out_dir, REWARD_CURVE_PNG), title=title)
        except Exception as error:  # a plot must never stop training
            logger.warning("could not draw the reward curve into %s: %r", out_dir, error)

    def _validate(self) -> dict[str, float]:
        # verl's method: runs validation and returns the metrics dict that the trainer then logs
        metrics = super()._validate()
        metrics = {**metrics, **self_correction_rates(metrics)}
        return {**metrics, **category_means(metrics)}

    def read_rewards(self, batch) -> tuple[list[str], list[dict]]:
        """Each sample's data source and the dict our reward function returned for it."""
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=FIELDS)
        data_sources = [str(source) for source in list(data["data_source"])]
        infos = [dict(extra or {}).get("reward_extra_info", {}) for extra in list(data["extra_fields"])]
        return data_sources, infos
