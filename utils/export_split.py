#!/usr/bin/env python
"""Write a split of a training config to parquet in verl's RLHF layout (optionally a ``datasets`` folder too).

    python utils/export_split.py --config-path configs/smoke --config-name cpu --split val --out exports/smoke_val
    python utils/export_split.py --config-path configs/inter_generalisation --config-name algorithmic_qwen_3b \\
        --split eval --out exports/algorithmic_eval --hf [--limit N] [--overwrite] [key=value ...]

The command line is rg_verl.data.cli (also run by ``rg-verl export``); its docstring and --help
describe the arguments and the output. This script only passes them on.
"""

import sys

from rg_verl.data.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main(prog="utils/export_split.py"))
