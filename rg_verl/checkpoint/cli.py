"""Command line of the checkpoint converter (``utils/load_fsdp_to_hf.py`` and ``rg-verl convert`` call :func:`main`).

    python utils/load_fsdp_to_hf.py <ckpt>/global_step_N/actor <out_dir> [name] [options]
    rg-verl convert <ckpt>/global_step_N/actor <out_dir> [name] [options]

The model is written to <out_dir>/<name>, or to <out_dir> without a name. reasoning-gym's older order,
<actor> <huggingface config folder> <output>, still works: when the second argument is a folder holding a
config.json and a third is given, config and tokenizer come from that folder.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from rg_verl.checkpoint import DEFAULT_MAX_SHARD_SIZE, DTYPES, CheckpointError, convert_checkpoint

DESCRIPTION = "Convert a verl FSDP checkpoint into a Hugging Face model folder (safetensors, config, tokenizer)."


def parse_args(argv: Sequence[str] | None = None, prog: str | None = None) -> argparse.Namespace:
    """The converter's arguments (``argv`` defaults to ``sys.argv[1:]``)."""
    parser = argparse.ArgumentParser(prog=prog, description=DESCRIPTION, epilog=__doc__.partition("\n\n")[2],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    add = parser.add_argument
    add("checkpoint", type=Path, help="the actor folder: <ckpt>/global_step_N/actor")
    add("out_dir", type=Path, help="output folder (or its parent when a name is given)")
    add("name", nargs="?", help="model folder name inside out_dir")
    add("--dtype", choices=list(DTYPES), default="auto", help="weights dtype; auto (default) keeps the stored one")
    add("--max-shard-size", default=DEFAULT_MAX_SHARD_SIZE,
        help=f"split the weights into files of at most this size, with an index (default {DEFAULT_MAX_SHARD_SIZE})")
    add("--force", action="store_true", help="replace the output folder if it exists")
    add("--verify", action="store_true", help="re-read the output and check every tensor against the shards")
    lora = parser.add_mutually_exclusive_group()
    lora.add_argument("--merge-lora", dest="merge_lora", action="store_true", default=True,
                      help="merge LoRA into the weights (default)")
    lora.add_argument("--keep-lora", dest="merge_lora", action="store_false",
                      help="write the base model plus a PEFT adapter in lora_adapter/")
    add("--lora-alpha", type=float, help="LoRA alpha, for checkpoints without lora_train_meta.json")
    add("--hf-dir", type=Path, help="config and tokenizer folder (default <checkpoint>/huggingface)")
    add("--trust-remote-code", action="store_true", help="allow the config's custom model code")
    add("--no-progress", dest="progress", action="store_false", help="no progress bar")
    return parser.parse_args(argv)  # fmt: skip


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """Converts as the arguments say and prints a one-line summary. Returns the exit status (1 on a bad checkpoint)."""
    args = parse_args(argv, prog)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
    out, hf_dir = args.out_dir, args.hf_dir
    if args.name:
        if hf_dir is None and (args.out_dir / "config.json").is_file():
            hf_dir, out = args.out_dir, Path(args.name)  # reasoning-gym's <actor> <hf config> <output>
        else:
            out = args.out_dir / args.name
    try:
        options = ("dtype", "max_shard_size", "force", "verify", "merge_lora", "lora_alpha", "trust_remote_code")
        result = convert_checkpoint(args.checkpoint, out, hf_dir=hf_dir, progress=args.progress,
                                    **{k: getattr(args, k) for k in options})  # fmt: skip
    except CheckpointError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(result.summary())
    return 0
