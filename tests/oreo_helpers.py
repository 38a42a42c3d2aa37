"""What the OREO tests share: synthetic trajectory files for a local model, and running train_oreo.py.

Synthetic trajectories are random response ids (ending in EOS) under real chat-template prompts, with
random 0/1 rewards: enough to check the trainer's plumbing, alignment, checkpoints and ranks, where what
is learned does not matter. The learning check collects real ones (tests/e2e/test_oreo_learning.py).
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO

__all__ = ["run_train_oreo", "untied_copy", "write_synthetic_trajectories"]

TRAIN_TIMEOUT_S = 900


def write_synthetic_trajectories(
    model: str | Path, out: Path, n_train: int = 16, n_val: int = 8, seed: int = 0, samples: int = 2
) -> Path:
    """``out/train`` and ``out/val`` shards of random trajectories tokenised by ``model``'s tokenizer."""
    from transformers import AutoTokenizer

    from rg_verl.oreo.trajectories import shard_name, tokenizer_fingerprint, write_shard

    tokenizer = AutoTokenizer.from_pretrained(str(model))
    metadata = {"tokenizer_fingerprint": tokenizer_fingerprint(tokenizer)}
    rng = random.Random(seed)
    for split, count in (("train", n_train), ("val", n_val)):
        rows = []
        for index in range(count // samples):
            messages = [{"role": "user", "content": f"What is {index} + {rng.randrange(100)}?"}]
            prompt_ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
            if not isinstance(prompt_ids, list):
                prompt_ids = prompt_ids["input_ids"]
            for sample in range(samples):
                response = [rng.randrange(10, 500) for _ in range(rng.randrange(3, 10))] + [tokenizer.eos_token_id]
                right = float(rng.random() < 0.5)
                rows.append(
                    {
                        "uid": f"{split}/{index}",
                        "split": split,
                        "index": index,
                        "sample_idx": sample,
                        "data_source": "reasoning_gym/chain_sum",
                        "prompt": "[]",
                        "prompt_ids": list(prompt_ids),
                        "response": tokenizer.decode(response),
                        "response_ids": response,
                        "ids_source": "backend",
                        "finished": True,
                        "score": right,
                        "accuracy": right,
                    }
                )
        write_shard(out / split / shard_name(0), rows, metadata)
    return out


def untied_copy(model: str | Path, out: Path) -> Path:
    """``model`` with its output embedding untied from its input embedding (same values), saved at ``out``.

    verl's FSDP2 engines on two gloo ranks give wrong gradients for tied embeddings (the config check refuses
    that setup); the tiny model ties them, so multi-rank CPU runs use this copy.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tied = AutoModelForCausalLM.from_pretrained(str(model))
    tied.config.tie_word_embeddings = False
    untied = type(tied)(tied.config)
    state = tied.state_dict()
    state["lm_head.weight"] = state["model.embed_tokens.weight"].clone()
    untied.load_state_dict(state)
    untied.save_pretrained(out)
    AutoTokenizer.from_pretrained(str(model)).save_pretrained(out)
    return out


def run_train_oreo(
    workdir: Path, *args: str, env: dict | None = None, ranks: int = 1, check: bool = True
) -> subprocess.CompletedProcess:
    """``python train_oreo.py *args`` (under ``torchrun`` with ``ranks`` > 1) in ``workdir``."""
    if ranks > 1:
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc_per_node={ranks}",
            str(REPO / "train_oreo.py"),
            *args,
        ]
    else:
        cmd = [sys.executable, str(REPO / "train_oreo.py"), *args]
    environ = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    proc = subprocess.run(cmd, cwd=workdir, env=environ, capture_output=True, text=True, timeout=TRAIN_TIMEOUT_S)
    if check:
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return proc
