"""Run in a fresh process by tests/unit/oreo/test_trainer.py: what the OREO losses read, against Hugging Face.

    python -m tests.oreo_probe <model dir> <trajectory dir> <out dir> <result.json>

Builds the trainer of ``configs/oreo/smoke_cpu.yaml`` on the trajectories (value head kept at its random
start, so values are not all zero), then measures, as the largest absolute differences:
- ``actor_vs_hf``: the actor engine's log π(a_t | s_t) against a direct forward of the same weights with
  transformers, read at position (prompt length − 1 + t);
- ``critic_vs_hf``: the critic engine's V(s_t) against ``AutoModelForTokenClassification`` at the same positions;
- ``loss_reads_vs_infer``: inside a training step, what the value loss reads from the critic's output (two
  micro-batches) and the log-probs the actor's update kept from its own forward, against the no-grad outputs
  of the same weights just before the step.
"""

from __future__ import annotations

import json
import sys
from functools import partial
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir

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
    from verl.workers.utils.padding import no_padding_2_padding

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
    before_lp = trainer._infer(trainer.actor, "log_probs", step_items, step_starts)
    read = []

    def recording(loss_fn):
        def record(model_output, data, dp_group=None):
            if "values" in model_output:  # the critic reads V(s_t) where its no-grad pass put it
                now = no_padding_2_padding(model_output["values"], data).detach()
                before = data.select("values").to_padded_tensor()["values"]
                mask = data.select("response_mask").to_padded_tensor()["response_mask"].bool()
                read.append((now - before)[mask].abs().max().item())
            return loss_fn(model_output=model_output, data=data, dp_group=dp_group)

        return record

    trainer.actor_loss.loss_fn = recording(partial(losses.oreo_policy_loss, trainer.loss_config))
    trainer.critic.set_loss_fn(recording(partial(losses.oreo_value_loss, trainer.loss_config)))
    trainer.step(trainer._reference())
    # the actor's update kept the log-probs of its own forward: the pre-update ones the value loss reads
    kept = trainer.actor_loss.log_probs([t.response_ids for t in step_items])
    read.append(max((a - b).abs().max().item() for a, b in zip(kept, before_lp, strict=True)))
    Path(result).write_text(
        json.dumps(
            {
                "actor_vs_hf": actor_diff,
                "critic_vs_hf": critic_diff,
                "loss_reads_vs_infer": max(read),
                "reads": len(read),
            }
        )
    )


if __name__ == "__main__":
    main(*sys.argv[1:5])
