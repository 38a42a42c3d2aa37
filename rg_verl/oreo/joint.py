"""One OREO update of both models, one forward and backward of each per micro-batch (nested: ``docs/oreo.md``)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

import torch
from tensordict import TensorDict
from verl.utils import tensordict_utils as tu
from verl.utils.py_functional import append_to_dict
from verl.utils.torch_functional import allgather_dict_into_dict
from verl.workers.engine_workers import TrainingWorker

from rg_verl.oreo.batches import nested, unbind_responses

__all__ = ["ActorInCriticLoss", "joint_update"]

Loss = Callable[..., tuple[torch.Tensor, dict[str, Any]]]


def _response_lengths(data: TensorDict) -> list[int]:
    return data["responses"].offsets().diff().tolist()


def _with_field(data: TensorDict, name: str, rows: list[torch.Tensor], device: torch.device) -> TensorDict:
    """A shallow copy of ``data`` with field ``name`` (the engines add keys: neither model sees the other's)."""
    copy = data.clone(recurse=False)
    copy[name] = nested([row.to(device) for row in rows])
    return copy


class ActorInCriticLoss:
    """The critic engine's loss of one joint update: the actor's forward and backward, then the value loss."""

    def __init__(self, actor: TrainingWorker, policy_loss: Loss, value_loss: Loss):
        self.actor, self.policy_loss, self.value_loss = actor, policy_loss, value_loss
        self.actor_outputs: list[dict[str, Any]] = []

    def __call__(self, model_output, data: TensorDict, dp_group=None):
        lengths = _response_lengths(data)
        device = model_output["values"].device
        values = unbind_responses(model_output["values"], lengths)
        actor_batch = _with_field(data, "values", values, device)
        tu.assign_non_tensor(actor_batch, return_model_output=True)
        output = self.actor.engine.forward_backward_batch(actor_batch, self.policy_loss, forward_only=False)
        log_probs = unbind_responses(output["model_output"].pop("log_probs"), lengths)
        self.actor_outputs.append({"loss": output["loss"], "metrics": output["metrics"]})
        critic_batch = _with_field(data, "old_log_probs", log_probs, device)
        return self.value_loss(model_output=model_output, data=critic_batch, dp_group=dp_group)


def _defaults(worker: TrainingWorker) -> dict[str, Any]:
    """The engine settings ``TrainingWorker.train_batch`` adds to a batch that lacks them."""
    engine = worker.engine_config
    return {
        "use_remove_padding": worker.model_config.get("use_remove_padding", False),
        "use_dynamic_bsz": engine.use_dynamic_bsz,
        "max_token_len_per_gpu": engine.max_token_len_per_gpu,
        "micro_batch_size_per_gpu": engine.micro_batch_size_per_gpu,
        "use_fused_kernels": engine.use_fused_kernels,
    }


def _finish(worker: TrainingWorker, losses: list[float], metrics: dict[str, Any], update_lr: bool) -> dict:
    """One model's optimizer and scheduler steps, and its metrics as ``TrainingWorker.train_batch`` gives them."""
    engine = worker.engine
    grad_norm = engine.optimizer_step()
    lr = engine.lr_scheduler_step() if update_lr else None
    group = engine.get_data_parallel_group()
    loss = torch.tensor(sum(losses), dtype=torch.float64, device=worker.device_name)
    if group is not None:
        torch.distributed.all_reduce(loss, op=torch.distributed.ReduceOp.AVG, group=group)
        metrics = allgather_dict_into_dict(data=metrics, group=group)
    metrics = {**metrics, "loss": loss.item()}
    metrics["grad_norm"] = grad_norm.detach().item() if isinstance(grad_norm, torch.Tensor) else grad_norm
    if lr is not None:
        metrics["lr"] = lr
    return metrics


def joint_update(
    actor: TrainingWorker, critic: TrainingWorker, batch: TensorDict, policy_loss: Loss, value_loss: Loss,
    update_lr: bool = True,
) -> dict[str, dict[str, Any]]:  # fmt: skip
    """Both models' update on this rank's ``batch`` (with ``ref_log_prob`` and ``returns``): their metrics by role."""
    for name, value in _defaults(critic).items():
        if name not in batch.keys():
            tu.assign_non_tensor(batch, **{name: value})
    tu.maybe_fix_3d_position_ids(batch)
    loss = ActorInCriticLoss(actor, policy_loss, value_loss)
    with ExitStack() as modes:
        modes.enter_context(actor.engine.train_mode())
        modes.enter_context(critic.engine.train_mode())
        actor.engine.optimizer_zero_grad()
        critic.engine.optimizer_zero_grad()
        output = critic.engine.forward_backward_batch(batch, loss, forward_only=False)
        actor_metrics: dict[str, Any] = {}
        for part in loss.actor_outputs:
            append_to_dict(actor_metrics, part["metrics"])
        metrics = {
            "actor": _finish(actor, [x for part in loss.actor_outputs for x in part["loss"]], actor_metrics, update_lr),
            "critic": _finish(critic, output["loss"], output["metrics"], update_lr),
        }
    return metrics
