"""Run in a fresh process by tests/unit/oreo/test_trainer.py: what the OREO losses read, against Hugging Face.

    python -m tests.oreo_probe <model dir> <trajectory dir> <out dir> <result.json>

Builds the trainer of ``configs/oreo/smoke_cpu.yaml`` on the trajectories (value head kept at its random
start, so values are not all zero), then measures, as the largest absolute differences:
- ``actor_vs_hf``: the actor engine's log π(a_t | s_t) against a direct forward of the same weights with
  transformers, read at position (prompt length − 1 + t);
- ``critic_vs_hf``: the critic engine's V(s_t) against ``AutoModelForTokenClassification`` at the same positions;
- ``loss_reads_vs_infer``: inside a training step (two micro-batches), the values the policy loss reads and the
  log-probs the value loss reads, against the no-grad outputs of the same weights just before the step;
- ``joint_vs_separate``: both models' weights after one joint step (one forward per model per micro-batch)
  against a second trainer from the same weights updated by the separate passes of verl's ``TrainingWorker``
  (the critic's and the actor's no-grad passes, then each model's ``train_batch``), and ``metrics_vs_separate``,
  the largest relative difference of the step's loss metrics and gradient norms (``weights_moved``: the
  smaller of the two models' largest weight change in the step, so that equal weights mean an update).
"""

from __future__ import annotations

import json
import sys
from functools import partial
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from verl.utils import tensordict_utils as tu

from tests.helpers import REPO


def main(model: str, trajectories: str, out: str, result: str) -> None:
    from rg_verl.oreo.config import validate
    from rg_verl.oreo.launch import prepare_process

    with initialize_config_dir(config_dir=str(REPO / "configs" / "oreo"), version_base=None):
        config = compose(
            "smoke_cpu",
            overrides=[
                f"actor.model.path={model}",
                f"data.train_files=[{trajectories}/train]",
                "data.val_files=[]",
                f"trainer.default_local_dir={out}",
                "oreo.zero_value_head=false",
                "data.shuffle=false",
            ],
        )
    settings = validate(config)
    prepare_process(config)
    from transformers import AutoModelForCausalLM, AutoModelForTokenClassification

    from rg_verl.oreo import losses
    from rg_verl.oreo.trainer import OreoTrainer

    trainer = OreoTrainer(config, settings)
    items, starts = trainer.train[:4], trainer.train_starts[:4]
    log_probs = trainer._infer(trainer.actor, "log_probs", items, starts)
    values = trainer._infer(trainer.critic, "values", items, starts)

    actor_hf = AutoModelForCausalLM.from_pretrained(model, torch_dtype=torch.float32).eval()
    critic_hf = AutoModelForTokenClassification.from_pretrained(trainer.out / "value_init").eval()
    actor_diff = critic_diff = 0.0
    for t, lp, v in zip(items, log_probs, values, strict=True):
        ids = torch.tensor([list(t.prompt_ids) + list(t.response_ids)])
        n_prompt, n_response = len(t.prompt_ids), len(t.response_ids)
        with torch.no_grad():
            logits = actor_hf(ids).logits[0].float().log_softmax(-1)
            scores = critic_hf(ids).logits[0, :, 0].float()
        positions = torch.arange(n_prompt - 1, n_prompt - 1 + n_response)
        expected = logits[positions, ids[0, n_prompt:]]
        actor_diff = max(actor_diff, (expected - lp).abs().max().item())
        critic_diff = max(critic_diff, (scores[positions] - v).abs().max().item())

    # the first step's batch (no shuffling): its rows' no-grad outputs before any update
    batch = trainer.plan.step(0)[1]
    step_items, step_starts = [trainer.train[i] for i in batch], [trainer.train_starts[i] for i in batch]
    before = {
        "old_log_probs": trainer._infer(trainer.actor, "log_probs", step_items, step_starts),
        "values": trainer._infer(trainer.critic, "values", step_items, step_starts),
    }
    read, offsets = [], {"values": 0, "old_log_probs": 0}

    def recording(loss_fn, field):
        def record(model_output, data, dp_group=None):  # micro-batches come in batch order
            now = data.select(field, "response_mask").to_padded_tensor()
            mask = now["response_mask"].bool().cpu()
            rows = before[field][offsets[field] : offsets[field] + len(mask)]
            offsets[field] += len(mask)
            expected = torch.zeros(mask.shape)
            for row, values in enumerate(rows):
                expected[row, : len(values)] = values
            read.append((now[field].cpu() - expected)[mask].abs().max().item())
            return loss_fn(model_output=model_output, data=data, dp_group=dp_group)

        return record

    trainer.policy_loss = recording(partial(losses.oreo_policy_loss, trainer.loss_config), "values")
    trainer.value_loss = recording(partial(losses.oreo_value_loss, trainer.loss_config), "old_log_probs")
    reference = trainer._reference()
    start = [_weights(trainer.actor), _weights(trainer.critic)]
    joint_metrics = trainer.step(reference)
    after = [_weights(trainer.actor), _weights(trainer.critic)]
    moved = min(max((a[k] - b[k]).abs().max().item() for k in a) for a, b in zip(start, after, strict=True))
    separate_metrics, weights_diff = _separate_step(config, out, trainer, reference, step_items, step_starts)
    compared = ("oreo/value_loss", "oreo/policy_loss", "oreo/kl", "actor/grad_norm", "critic/grad_norm")
    metrics_diff = max(
        abs(joint_metrics[k] - separate_metrics[k]) / max(abs(separate_metrics[k]), 1e-8) for k in compared
    )
    Path(result).write_text(
        json.dumps(
            {
                "actor_vs_hf": actor_diff,
                "critic_vs_hf": critic_diff,
                "loss_reads_vs_infer": max(read),
                "reads": len(read),
                "joint_vs_separate": weights_diff,
                "weights_moved": moved,
                "metrics_vs_separate": metrics_diff,
            }
        )
    )


def _weights(worker) -> dict[str, torch.Tensor]:
    state = worker.engine.module.state_dict()
    return {k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().float().clone() for k, v in state.items()}


def _separate_step(config, out, joint, reference, items, starts):
    """A second trainer from the joint one's starting weights, updated by the separate passes; returns its
    metrics and the largest absolute weight difference to the joint trainer after the step."""
    from omegaconf import OmegaConf

    from rg_verl.oreo.config import validate
    from rg_verl.oreo.trainer import OreoTrainer, summarise

    config = OmegaConf.merge(config, {"trainer": {"default_local_dir": f"{out}_separate"},
                                      "critic": {"model": {"path": str(joint.out / "value_init")}}})  # fmt: skip
    trainer = OreoTrainer(config, validate(config))
    extra = {"ref_log_prob": [reference[i] for i in trainer.plan.step(0)[1]]}
    extra["values"] = trainer._infer(trainer.critic, "values", items, starts)
    extra["old_log_probs"] = trainer._infer(trainer.actor, "log_probs", items, starts)
    metrics = {}
    for name, worker in (("actor", trainer.actor), ("critic", trainer.critic)):
        batch = trainer._batch(items, starts, extra, global_batch=trainer.settings.data.train_batch_size)
        tu.assign_non_tensor(batch, update_lr_scheduler=True)
        for key, value in summarise(worker.train_batch(batch)["metrics"]).items():
            metrics[key if key.startswith("oreo/") else f"{name}/{key}"] = value
    diff = 0.0
    for a, b in ((joint.actor, trainer.actor), (joint.critic, trainer.critic)):
        wa, wb = _weights(a), _weights(b)
        diff = max(diff, max((wa[k] - wb[k]).abs().max().item() for k in wa))
    return metrics, diff


if __name__ == "__main__":
    main(*sys.argv[1:5])
