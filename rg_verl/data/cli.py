"""The export command, ``rg-verl export`` (and ``utils/export_split.py``): a split of a training config to parquet."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from rg_verl.common.compose import compose_command, config_parser, parse_command
from rg_verl.common.names import SPLITS
from rg_verl.data.export import MANIFEST, export_split

DESCRIPTION = (
    "Write a split of a training config to parquet in verl's RLHF layout (with --hf, also a Hugging Face "
    "datasets folder). The config is composed as rg-verl train composes it."
)
EPILOG = """\
  rg-verl export --split val --out exports/smoke_val        # the CPU smoke config (configs/smoke/cpu.yaml)
  rg-verl export --config-path configs/inter_generalisation --config-name algorithmic_qwen_3b \\
      --split eval --out exports/algorithmic_eval --hf reasoning_gym.eval_size=500

The folder gets <split>.parquet, manifest.json (config, seeds, held-out rule, versions) and, with --hf, hf/.
verl reads the parquet as data.train_files / data.val_files with rg-verl's reward (rg_verl.reward.compute_score).
Set PYTHONHASHSEED=0, as a training run does, for the few generators whose items follow it."""


def build_parser(prog: str = "rg-verl export") -> argparse.ArgumentParser:
    """The config command line (``--config-path``, ``--config-name``, ``--cfg``) plus the export's options."""
    parser = config_parser(prog, DESCRIPTION, EPILOG)
    parser.usage = (
        f"{prog} [--config-path DIR] [--config-name NAME] --split {{{','.join(SPLITS)}}} --out DIR "
        "[--hf] [--limit N] [--overwrite] [key=value ...]"
    )
    parser.add_argument("--split", choices=SPLITS, help="the split to export (required)")
    parser.add_argument("--out", metavar="DIR", help="output folder; must not exist or be empty (required)")
    parser.add_argument("--hf", action="store_true", help="also write a Hugging Face datasets folder, DIR/hf")
    parser.add_argument("--limit", type=int, metavar="N", help="export only the split's first N items")
    parser.add_argument("--overwrite", action="store_true", help="replace a non-empty DIR once the export is done")
    return parser


def main(argv: Sequence[str] | None = None, prog: str = "rg-verl export") -> int:
    """Runs ``rg-verl export``. Returns 0, or 1 after a one-line error; a usage error exits with 2."""
    from hydra.errors import HydraException

    args, overrides = parse_command(build_parser(prog), sys.argv[1:] if argv is None else argv, ("split", "out"))
    try:
        config = compose_command(args, overrides)
        if config is None:  # --cfg printed it
            return 0
        out = export_split(config, args.split, args.out, hf=args.hf, limit=args.limit, overwrite=args.overwrite)
    except (HydraException, ValueError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    manifest = json.loads((out / MANIFEST).read_text())
    print(f"{out}: {manifest['rows']} {args.split} items ({manifest['files']['parquet']}, {MANIFEST})")
    return 0
