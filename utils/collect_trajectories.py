#!/usr/bin/env python
"""Collect OREO trajectories: K sampled, scored completions per item of a training config.

    python utils/collect_trajectories.py --config-path configs/smoke --config-name learn \
        --out outputs/oreo_smoke/trajectories --samples 4 --train-items 8 --val-items 4
    python utils/collect_trajectories.py --help

The command line is rg_verl.oreo.collect (also run by ``rg-verl oreo collect``); this script only passes
the arguments on.
"""

import sys

from rg_verl.oreo.collect import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], prog="collect_trajectories.py"))
