"""A checkpoint of a real training run (train_grpo.py on the CPU smoke config) converts to the model verl restores.

Slow (a training run on the CPU, minutes); the converter's fast tests are in tests/unit/checkpoint.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from safetensors.torch import load_file

from rg_verl.checkpoint import convert_checkpoint, inspect_checkpoint
from rg_verl.checkpoint.synthetic import (
    cpu_mesh,
    full_state,
    gloo_group,
    load_checkpoint,
    quiet_worker,
    shard_like_verl,
)
from tests.checkpoint_helpers import PROMPT, load_hf, logits_of, output_tensors
from tests.helpers import run_train_grpo

pytestmark = pytest.mark.slow


def _reload_worker(rank: int, world: int, actor_dir: str, out: str) -> None:
    """The trained actor as verl restores it: FSDP2 model + FSDPCheckpointManager.load_checkpoint."""
    from transformers import AutoConfig, AutoModelForCausalLM

    quiet_worker()
    with gloo_group(f"{out}.init", rank, world):
        torch.manual_seed(123)  # any weights: the checkpoint overwrites them
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(Path(actor_dir) / "huggingface"))
        load_checkpoint(shard_like_verl(model, cpu_mesh(world)), actor_dir)
        with torch.no_grad():
            logits = model(input_ids=PROMPT).logits
        state = full_state(model)
        if rank == 0:
            torch.save({"logits": logits, "state": state}, out)
        dist.barrier()


@pytest.mark.parametrize("world", [2])  # 1 rank works too; left out to keep the file's run time down
def test_converts_a_real_training_run(tmp_path, world):
    import torch.multiprocessing as mp

    run_train_grpo(
        tmp_path,
        f"trainer.default_local_dir={tmp_path / 'ckpt'}",
        "trainer.total_training_steps=1",
        "trainer.save_freq=1",
        "trainer.test_freq=-1",
        f"trainer.n_gpus_per_node={world}",
        # 4 prompts x 2 samples split over the ranks
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={8 // world}",
        f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={8 // world}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={4 // world}",
        env={"RG_VERL_TINY_MODEL": str(tmp_path / "model")},
    )
    src = tmp_path / "ckpt" / "global_step_1" / "actor"
    assert inspect_checkpoint(src).world_size == world

    mp.spawn(_reload_worker, args=(world, str(src), str(tmp_path / "reloaded.pt")), nprocs=world, join=True)
    ref = torch.load(tmp_path / "reloaded.pt", weights_only=True)
    result = convert_checkpoint(src, tmp_path / "hf", verify=True, progress=False)
    assert result.world_size == world and result.dtype == "float32"
    tensors = output_tensors(tmp_path / "hf")
    for key, value in ref["state"].items():
        assert torch.equal(tensors[key if key != "lm_head.weight" else "model.embed_tokens.weight"], value), key
    torch.testing.assert_close(logits_of(load_hf(tmp_path / "hf")), ref["logits"], rtol=1e-5, atol=1e-5)
    init = load_file(tmp_path / "model" / "model.safetensors")
    assert any(not torch.equal(init[k], tensors[k]) for k in init)  # training moved the weights
