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

__all__ = [
    "CONDITIONS", "collect", "learning_run", "mean_score", "run_train_oreo", "untied_copy",
    "write_synthetic_trajectories",
]  # fmt: skip

TRAIN_TIMEOUT_S = 1800


def write_synthetic_trajectories(
    model: str | Path, out: Path, n_train: int = 16, n_val: int = 8, seed: int = 0, samples: int = 2
) -> Path:
    """``out/train`` and ``out/val`` shards of random trajectories tokenised by ``model``'s tokenizer."""
    from transformers import AutoTokenizer

    from rg_verl.common.tokenizer import tokenizer_fingerprint
    from rg_verl.oreo.trajectories import shard_name, write_shard

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


# ---- the learning check (tests/e2e/test_oreo_learning.py) and its calibration (tests/oreo_calibrate.py)

# the three runs of one learning check: the real reward, and two negative controls made in the config only
CONDITIONS = {
    "oreo": [],
    "permuted": ["oreo.reward.permute_seed=0"],  # rewards shuffled across trajectories: nothing to learn
    "flipped": ["oreo.reward.mul=-1", "oreo.reward.add=1"],  # R = 1 - score: the policy is paid to lose the format
}
LEARN_ITEMS, LEARN_VAL_ITEMS, LEARN_SAMPLES = 64, 32, 8


def collect(workdir: Path, out: Path, model: Path, *args: str) -> Path:
    """``utils/collect_trajectories.py`` on the learn config; returns ``out``. The config's warm-started tiny
    model is built at ``model`` when missing (``--model-path`` in ``args`` samples another model)."""
    cmd = [
        sys.executable, str(REPO / "utils" / "collect_trajectories.py"), "--config-path", str(REPO / "configs/smoke"),
        "--config-name", "learn", "--out", str(out), "--samples", str(LEARN_SAMPLES),
        f"reasoning_gym.val_size={LEARN_VAL_ITEMS}", *args,
    ]  # fmt: skip
    environ = {**os.environ, "OMP_NUM_THREADS": "1", "RG_VERL_LEARN_MODEL": str(model)}
    proc = subprocess.run(cmd, cwd=workdir, env=environ, capture_output=True, text=True, timeout=TRAIN_TIMEOUT_S)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return out


def mean_score(folder: Path) -> float:
    """The mean reward (``score``) of the trajectories under ``folder``."""
    from rg_verl.oreo.trajectories import load_trajectories

    rows = load_trajectories(folder, reward_key="score")
    return sum(t.reward for t in rows) / len(rows)


def learning_run(workdir: Path, model: Path, trajectories: Path, condition: str, seed: int) -> dict[str, float]:
    """Train ``configs/oreo/learn_cpu.yaml`` on ``trajectories`` under ``condition``, convert the actor, sample
    the held-out items again with it (the collection's own seeds) and measure.

    Returns the last validation's value AUCs and the policy's held-out mean reward before and after.
    """
    from rg_verl.checkpoint.cli import main as convert
    from rg_verl.grpo.reward_curve import read_metrics

    workdir.mkdir(parents=True, exist_ok=True)
    metrics_file = workdir / "metrics.jsonl"
    run_train_oreo(
        workdir, "--config-name", "learn_cpu",
        f"data.train_files=[{trajectories / 'train'}]", f"data.val_files=[{trajectories / 'val'}]",
        f"trainer.default_local_dir={workdir / 'out'}", "trainer.logger=[console,file]",
        f"trainer.seed={seed}", f"data.seed={seed}", *CONDITIONS[condition],
        env={"RG_VERL_LEARN_MODEL": str(model), "VERL_FILE_LOGGER_PATH": str(metrics_file)},
    )  # fmt: skip
    metrics = read_metrics(metrics_file)
    last = metrics[max(metrics)]
    steps = sorted(int(p.name.split("_")[-1]) for p in (workdir / "out").glob("global_step_*"))
    actor = workdir / "actor_hf"
    assert convert([str(workdir / "out" / f"global_step_{steps[-1]}" / "actor"), str(actor)]) == 0
    after = collect(workdir, workdir / "after", model, "--model-path", str(actor), "--train-items", "0",
                    "--val-items", str(LEARN_VAL_ITEMS), "--seed", str(seed))  # fmt: skip
    return {
        "auc_last": last["val/value_auc_last"],
        "auc_second": last["val/value_auc_second"],
        "value_gap": last["val/value_gap_last"],
        "value_loss_first": metrics[1]["oreo/value_loss"],
        "reward_before": mean_score(trajectories / "val"),
        "reward_after": mean_score(after / "val"),
    }
