#!/usr/bin/env python
"""Convert a verl FSDP checkpoint into a Hugging Face model folder (safetensors, config, tokenizer).

    python utils/load_fsdp_to_hf.py <ckpt>/global_step_N/actor <out_dir> [name] [options]
    python utils/load_fsdp_to_hf.py <ckpt>/global_step_N/actor <hf config folder> <output>   # reasoning-gym's order
    python utils/load_fsdp_to_hf.py --help

The command line is rg_verl.checkpoint.cli (also run by ``rg-verl convert``); its docstring and --help
describe the arguments and options. This script only passes them on.
"""

import sys

from rg_verl.checkpoint.cli import main, parse_args

__all__ = ["main", "parse_args"]

if __name__ == "__main__":
    sys.exit(main())
