"""The OREO training loop: a policy and a value model, each a verl ``TrainingWorker`` (``docs/oreo.md``)."""

from __future__ import annotations

import gc
import logging
import math
import os
import shutil
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from omegaconf import DictConfig, OmegaConf
from verl.utils import tensordict_utils as tu
from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path, get_checkpoint_tracker_filename
from verl.utils.metric import Metric
from verl.utils.tracking import Tracking
from verl.workers.engine_workers import TrainingWorker, TrainingWorkerConfig

from rg_verl.common.atomic import write_atomic
from rg_verl.common.stats import per_group_means
from rg_verl.oreo import checkpoints
from rg_verl.oreo.batches import BatchPlan, chunks, engine_batch, step_starts, unbind_responses
from rg_verl.oreo.config import ACTOR_INIT, OreoSettings, verl_sections, world_size
from rg_verl.oreo.joint import joint_update
from rg_verl.oreo.losses import OreoLossConfig, oreo_policy_loss, oreo_value_loss
from rg_verl.oreo.metrics import roc_auc
from rg_verl.oreo.trajectories import Trajectory, load_trajectories
from rg_verl.oreo.value_init import prepare_value_model

__all__ = ["OreoTrainer"]

logger = logging.getLogger(__name__)

REFERENCE_FILE = "reference_log_probs.pt"


def summarise(metrics: dict[str, Any]) -> dict[str, float]:
    """One number per metric of a worker's output: verl ``Metric``s aggregate as declared, lists as means."""
    out = {}
    for name, value in metrics.items():
        if isinstance(value, Metric):
            out[name] = float(value.aggregate())
        elif isinstance(value, list) and value and isinstance(value[0], Metric):
            out[name] = float(Metric.aggregate_dp(value))
        elif isinstance(value, list) and value:
            flat = [v for v in value if isinstance(v, int | float)]
            if flat:
                reduce = max if name.endswith("_max") else min if name.endswith("_min") else None
                out[name] = float(reduce(flat) if reduce else sum(flat) / len(flat))
        elif isinstance(value, int | float):
            out[name] = float(value)
    return out


class OreoTrainer:
    """An OREO run of one composed config (checked by :func:`rg_verl.oreo.config.validate` first)."""

    def __init__(self, config: DictConfig, settings: OreoSettings):
        from transformers import AutoTokenizer

        self.config, self.settings = config, settings
        self.rank, self.ranks = int(os.environ.get("RANK", "0")), world_size()
        self.out = Path(settings.trainer.default_local_dir)
        self.tokenizer = AutoTokenizer.from_pretrained(config.actor.model.path)
        self.train = self._load(settings.data.train_files, validation=False)
        # held-out trajectories keep the reward as collected: the value model is judged against the true outcome
        self.val = self._load(settings.data.val_files, validation=True) if settings.data.val_files else []
        delimiters = list(settings.oreo.step_delimiters) if settings.oreo.variant == "step" else None
        self.train_starts = [step_starts(t.response_ids, self.tokenizer, delimiters) for t in self.train]
        self.val_starts = [step_starts(t.response_ids, self.tokenizer, None) for t in self.val]
        data = settings.data
        self.plan = BatchPlan(len(self.train), data.train_batch_size, data.seed, data.shuffle, self.rank, self.ranks)
        epochs_steps = self.plan.steps_per_epoch * settings.trainer.total_epochs
        self.total_steps = min(epochs_steps, settings.trainer.total_training_steps or epochs_steps)
        self.loss_config = OreoLossConfig(
            variant=settings.oreo.variant,
            beta=settings.oreo.beta,
            alpha=settings.oreo.alpha,
            kl_type=settings.oreo.kl_type,
        )
        self.policy_loss = partial(oreo_policy_loss, self.loss_config)
        self.value_loss = partial(oreo_value_loss, self.loss_config)
        self.actor = self._worker("actor", "language_model", config.actor.model.path)
        self.actor.set_loss_fn(self.policy_loss)
        critic_path = self._critic_start(config.critic.model.path)
        self.critic = self._worker("critic", "value_model", critic_path)
        self.critic.set_loss_fn(self.value_loss)
        self.global_step = 0

    def _load(self, files: list[str], validation: bool) -> list[Trajectory]:
        reward, oreo = self.settings.oreo.reward, self.settings.oreo
        return load_trajectories(
            files,
            reward_key=reward.key,
            reward_mul=1.0 if validation else reward.mul,
            reward_add=0.0 if validation else reward.add,
            balance=None if validation else oreo.balance,
            max_length=self.settings.data.max_length,
            tokenizer=self.tokenizer,
            permute_seed=None if validation else reward.permute_seed,
        )

    def _critic_start(self, source: str) -> str:
        """The value model's starting folder (written by rank 0, read by every rank)."""
        out = self.out / "value_init"
        if self.rank == 0:
            prepare_value_model(source, out, zero_head=self.settings.oreo.zero_value_head)
        self._barrier()
        return str(out)

    def _worker(self, role: str, model_type: str, path: str) -> TrainingWorker:
        section = OmegaConf.to_container(self.config[role], resolve=True)
        section["model"]["path"] = path
        sections = verl_sections(OmegaConf.create(section))
        sections["optim"].total_training_steps = self.total_steps
        worker = TrainingWorker(
            TrainingWorkerConfig(
                model_type=model_type,
                model_config=sections["model"],
                engine_config=sections["engine"],
                optimizer_config=sections["optim"],
                checkpoint_config=checkpoints.checkpoint_config(self.config),
            )
        )
        worker.reset()
        return worker

    def _barrier(self) -> None:
        if dist.is_initialized():
            dist.barrier()

    def _meta(self, batch_size: int) -> dict[str, Any]:
        data = self.settings.data
        return {
            "global_batch_size": batch_size,
            "micro_batch_size_per_gpu": data.micro_batch_size_per_gpu,
            "use_dynamic_bsz": False,
            "use_remove_padding": bool(self.config.actor.model.get("use_remove_padding", False)),
            "max_token_len_per_gpu": data.max_length,
        }

    def _batch(self, trajectories, starts, extra=None, global_batch: int | None = None):
        meta = self._meta(global_batch or len(trajectories))
        return engine_batch(trajectories, starts, extra, **meta)

    def _infer(self, worker: TrainingWorker, key: str, trajectories, starts) -> list[torch.Tensor]:
        batch = self._batch(trajectories, starts)
        tu.assign_non_tensor(batch, compute_loss=False)
        output = worker.infer_batch(batch)
        return unbind_responses(output[key], [len(t.response_ids) for t in trajectories])

    def _infer_all(self, worker: TrainingWorker, key: str, items: list[Trajectory], starts) -> list[torch.Tensor]:
        """``key`` for every trajectory of ``items``: each rank infers its chunks, then all ranks share them."""
        size = self.settings.data.micro_batch_size_per_gpu
        mine: dict[int, torch.Tensor] = {}
        for chunk in chunks(list(range(len(items))), size, self.rank, self.ranks):
            outputs = self._infer(worker, key, [items[i] for i in chunk], [starts[i] for i in chunk])
            mine.update(zip(chunk, outputs, strict=True))
        if self.ranks > 1:
            gathered: list[dict[int, torch.Tensor]] = [{} for _ in range(self.ranks)]
            dist.all_gather_object(gathered, mine)
            for part in gathered:
                mine.update(part)
        return [mine[i] for i in range(len(items))]

    def _reference(self) -> list[torch.Tensor]:
        """Every training trajectory's reference log-probs, computed once (starting weights or ``oreo.reference``)."""
        path = self.out / REFERENCE_FILE
        source = self.settings.oreo.reference
        key = checkpoints.trajectories_key(self.train) + ("" if source == ACTOR_INIT else f"|{Path(source).resolve()}")
        if path.is_file():
            stored = torch.load(path, weights_only=True)
            if stored.get("key") == key:
                return stored["log_probs"]
            logger.warning("%s was made from other trajectories or another reference; computing it again", path)
        if self.global_step > 0 and source == ACTOR_INIT:
            raise RuntimeError(
                f"{path}: the reference log-probs of this run are missing or stale, and the actor has trained since; "
                "restore the file, or start again with trainer.resume_mode=disable"
            )
        if source == ACTOR_INIT:
            log_probs = self._infer_all(self.actor, "log_probs", self.train, self.train_starts)
        else:  # a third model for one no-grad pass, then freed
            reference = self._worker("actor", "language_model", source)
            log_probs = self._infer_all(reference, "log_probs", self.train, self.train_starts)
            del reference
            gc.collect()
        if self.rank == 0:
            self.out.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            torch.save({"key": key, "log_probs": log_probs}, tmp)
            os.replace(tmp, path)
        self._barrier()
        return log_probs

    def step(self, reference: list[torch.Tensor]) -> dict[str, float]:
        """One OREO update of both models on the batch of ``self.global_step``; returns its metrics."""
        epoch, indices = self.plan.step(self.global_step)
        items = [self.train[i] for i in indices]
        starts = [self.train_starts[i] for i in indices]
        extra = {"ref_log_prob": [reference[i] for i in indices]}
        batch = self._batch(items, starts, extra, global_batch=self.settings.data.train_batch_size)
        parts = joint_update(self.actor, self.critic, batch, self.policy_loss, self.value_loss)
        metrics = {"train/epoch": float(epoch)}
        for name, part in parts.items():
            metrics.update({k if k.startswith("oreo/") else f"{name}/{k}": v for k, v in summarise(part).items()})
        batch = [self.train[i] for i in self.plan.batch(self.global_step)[1]]  # every rank's
        metrics["train/reward_mean"] = sum(t.reward for t in batch) / len(batch)
        for source, mean in per_group_means([t.reward for t in batch], [t.data_source for t in batch]).items():
            metrics[f"train/{source}/reward_mean"] = mean
        return metrics

    def validate(self) -> dict[str, float]:
        """The value model's AUC at predicting success on the held-out trajectories, at s_0, s_1 and the last state."""
        if not self.val:
            return {}
        values = self._infer_all(self.critic, "values", self.val, self.val_starts)
        labels = [t.reward > 0 for t in self.val]
        metrics = {}
        for name, pick in (("first", 0), ("second", 1), ("last", -1)):
            scores = [float(v[min(pick, len(v) - 1)]) if pick >= 0 else float(v[-1]) for v in values]
            metrics[f"val/value_auc_{name}"] = roc_auc(scores, labels)
        last = [float(v[-1]) for v in values]
        right = [v for v, label in zip(last, labels, strict=True) if label]
        wrong = [v for v, label in zip(last, labels, strict=True) if not label]
        metrics["val/value_last_mean"] = sum(last) / len(last)
        if right and wrong:  # the separation in reward units (the AUC only ranks)
            metrics["val/value_gap_last"] = sum(right) / len(right) - sum(wrong) / len(wrong)
        metrics["val/success_rate"] = sum(labels) / len(labels)
        for source, mean in per_group_means(last, [t.data_source for t in self.val]).items():
            metrics[f"val/{source}/value_last_mean"] = mean
        return metrics

    def _resume(self) -> None:
        trainer = self.settings.trainer
        if trainer.resume_mode == "disable":
            return
        path = trainer.resume_from_path if trainer.resume_mode == "resume_path" else find_latest_ckpt_path(self.out)
        if path is None:
            return
        self.global_step = checkpoints.load(path, self.actor, self.critic)
        logger.info("resumed from %s at step %d", path, self.global_step)

    def save(self) -> None:
        """``global_step_N/{actor,critic}``; the tracker names it only once both are written."""
        folder = self.out / f"global_step_{self.global_step}"
        checkpoints.save(folder, self.actor, self.critic, self.global_step, self.rank)
        self._barrier()
        if self.rank == 0:
            write_atomic(get_checkpoint_tracker_filename(str(self.out)), f"{self.global_step}\n")
            self._prune()
        self._barrier()

    def _prune(self) -> None:
        keep = self.settings.trainer.max_ckpt_to_keep
        if not keep:
            return
        steps = sorted(int(p.name.split("_")[-1]) for p in self.out.glob("global_step_*") if p.name[12:].isdigit())
        for step in steps[:-keep]:
            shutil.rmtree(self.out / f"global_step_{step}", ignore_errors=True)

    def fit(self) -> dict[str, float]:
        """Train to ``total_steps``; returns the last step's metrics (with the last validation's)."""
        trainer = self.settings.trainer
        torch.manual_seed(trainer.seed)
        self._resume()
        reference = self._reference()
        tracker = None
        if self.rank == 0:
            tracker = Tracking(
                project_name=trainer.project_name,
                experiment_name=trainer.experiment_name,
                default_backend=list(trainer.logger),
                config=OmegaConf.to_container(self.config, resolve=True),
            )
        metrics: dict[str, float] = {}
        if self.global_step == 0 and trainer.test_freq > 0:
            metrics.update(self.validate())
            if tracker:
                tracker.log(data=metrics, step=0)
        while self.global_step < self.total_steps:
            metrics = self.step(reference)
            self.global_step += 1
            last = self.global_step == self.total_steps
            if trainer.test_freq > 0 and (last or self.global_step % trainer.test_freq == 0):
                metrics.update(self.validate())
            if tracker:
                tracker.log(data={k: v for k, v in metrics.items() if not math.isnan(v)}, step=self.global_step)
            if last or (trainer.save_freq > 0 and self.global_step % trainer.save_freq == 0):
                self.save()
        return metrics
