"""Rejection-sampling fine-tuning (RFT): verl's SFT trainer on the correct trajectories of a collection.

    rg-verl oreo rft --trajectories OUT/train --model-path MODEL --out DIR [--per-item 4] [--device cpu] \\
        [key=value ...]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from rg_verl.common.compose import parse_command
from rg_verl.common.schema import ConfigError
from rg_verl.cpu.settings import apply_settings, cpu_env
from rg_verl.oreo.launch import single_process_env
from rg_verl.oreo.trajectories import Trajectory, load_trajectories

__all__ = ["CPU_SETTINGS", "build_parser", "main", "rft_rows", "sft_config"]

logger = logging.getLogger(__name__)

DATA_FILE = "rft_train.parquet"
# verl's SFT config on the CPU platform, as the OREO CPU configs have it (float32: bf16 autocast is slow on a CPU)
CPU_SETTINGS = {
    "trainer.device": "cpu", "engine.strategy": "fsdp2", "model.override_config.attn_implementation": "sdpa",
    "engine.use_torch_compile": False, "model.use_remove_padding": False,
    "engine.mixed_precision": {"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"},
    "model.enable_gradient_checkpointing": False, "data.num_workers": 0,
}  # fmt: skip


def rft_rows(
    trajectories: Sequence[Trajectory], per_item: int | None = None, min_reward: float = 1.0
) -> list[dict[str, Any]]:
    """SFT conversations of trajectories rewarded ``min_reward`` or more: per item up to ``per_item`` distinct ones."""
    if per_item is not None and per_item < 1:
        raise ConfigError(f"--per-item: {per_item} is below 1; keep at least one response per item, or leave it out")
    kept: dict[str, list[Trajectory]] = defaultdict(list)
    for t in sorted(trajectories, key=lambda t: (t.uid, t.sample_idx)):
        responses = [k.response for k in kept[t.uid]]
        if t.reward >= min_reward and t.response not in responses and (per_item is None or len(responses) < per_item):
            kept[t.uid].append(t)
    rows = []
    for uid in sorted(kept):
        for t in kept[uid]:
            messages = json.loads(t.prompt) + [{"role": "assistant", "content": t.response}]
            rows.append({"messages": messages, "uid": uid, "sample_idx": t.sample_idx, "data_source": t.data_source})
    return rows


def sft_config(model_path: str, data_file: Path, out: Path, overrides: Sequence[str], device: str):
    """verl's ``sft_trainer_engine`` config composed with this run's fields, then ``overrides``."""
    import verl
    from hydra import compose, initialize_config_dir

    base = [
        f"model.path={model_path}", f"data.train_files={data_file}", "data.val_files=null",
        f"trainer.default_local_dir={out}", "trainer.logger=[console]", "trainer.project_name=rg_verl_rft",
        "trainer.experiment_name=rft", "data.use_dynamic_bsz=False",
    ]  # fmt: skip
    with initialize_config_dir(config_dir=os.path.join(os.path.dirname(verl.__file__), "trainer", "config"),
                               version_base=None):  # fmt: skip
        config = compose("sft_trainer_engine", overrides=base + list(overrides))
    if device == "cpu":
        apply_settings(config, CPU_SETTINGS)
    return config


def _checked_batch(config, rows: int) -> None:
    ranks = int(os.environ.get("WORLD_SIZE", "1"))
    batch, micro = int(config.data.train_batch_size), int(config.data.micro_batch_size_per_gpu)
    if rows < batch:
        raise ConfigError(
            f"data.train_batch_size: {batch}, but only {rows} trajectories to fine-tune on; lower it "
            f"(data.train_batch_size=N), or collect more"
        )
    if batch % (ranks * micro):
        raise ConfigError(
            f"data.train_batch_size: {batch} does not split into {ranks} ranks x "
            f"data.micro_batch_size_per_gpu={micro}; set a multiple of {ranks * micro}"
        )


def run(args: argparse.Namespace, overrides: Sequence[str]) -> Path:
    """Writes the RFT data, checks the config, and trains; returns the output folder."""
    trajectories = load_trajectories(args.trajectories, reward_key=args.reward_key)
    rows = rft_rows(trajectories, args.per_item, args.min_reward)
    if not rows:
        raise ConfigError(
            f"--min-reward: none of the {len(trajectories)} trajectories has {args.reward_key} >= {args.min_reward}; "
            "nothing to fine-tune on (choose another --reward-key or --min-reward, or collect more)"
        )
    out = Path(args.out).expanduser().absolute()
    data_file = out / DATA_FILE
    config = sft_config(args.model_path, data_file, out, overrides, args.device)
    _checked_batch(config, len(rows))  # before anything is written
    out.mkdir(parents=True, exist_ok=True)
    tmp = data_file.with_suffix(".tmp")
    pq.write_table(pa.Table.from_pylist(rows), tmp)
    os.replace(tmp, data_file)
    logger.info("%d trajectories of %d items -> %s", len(rows), len({r["uid"] for r in rows}), data_file)
    single_process_env()
    if args.device == "cpu":
        os.environ.update(cpu_env())
        # lazy: the CPU platform imports verl and registers itself with it; a GPU run must not import it
        import rg_verl.cpu.platform  # noqa: F401
    # lazy: verl's SFT trainer imports its engines, which pick the platform when imported
    from verl.trainer.sft_trainer import run_sft

    run_sft(config)
    return out


def build_parser(prog: str = "rg-verl oreo rft") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    parser.add_argument("--trajectories", required=True, help="a collection's split folder (<out>/train), or files")
    parser.add_argument("--model-path", required=True, help="the model to fine-tune (the collection's start)")
    parser.add_argument("--out", required=True, help="the output folder: the data, then global_step_N checkpoints")
    parser.add_argument("--per-item", type=int, help="at most this many distinct correct responses per item")
    parser.add_argument("--reward-key", default="accuracy", help="the reward column that decides (default: accuracy)")
    parser.add_argument("--min-reward", type=float, default=1.0, help="keep rows with at least this (default: 1)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda", help="cpu: this process, CPU platform")
    return parser


def main(argv: Sequence[str] | None = None, prog: str = "rg-verl oreo rft") -> int:
    """Runs ``rg-verl oreo rft``; returns 0, or 1 after a one-line error."""
    args, overrides = parse_command(build_parser(prog), sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        out = run(args, overrides)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"{out}: rejection-sampling fine-tuning done")
    return 0
