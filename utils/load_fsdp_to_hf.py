#!/usr/bin/env python
"""Convert a verl FSDP checkpoint into a Hugging Face model folder (safetensors, config, tokenizer).

    python utils/load_fsdp_to_hf.py <ckpt>/global_step_N/actor <out_dir> [name] [options]

The model is written to <out_dir>/<name>, or to <out_dir> without a name. reasoning-gym's older order,
<actor> <huggingface config folder> <output>, still works: when the second argument is a folder holding a
config.json and a third is given, config and tokenizer come from that folder. The work is done by
rg_verl.checkpoint (its command line is rg_verl.checkpoint.cli, also run by ``rg-verl convert``); this
script only passes the arguments on.
"""

import sys

from rg_verl.checkpoint.cli import main, parse_args

__all__ = ["main", "parse_args"]

if __name__ == "__main__":
    sys.exit(main())
