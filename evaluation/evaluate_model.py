#!/usr/bin/env python
"""Evaluate a model on reasoning-gym datasets, as an evaluation YAML describes.

    python evaluation/evaluate_model.py --config evaluation/configs/smoke.yaml --model-path DIR
    python evaluation/evaluate_model.py --config evaluation/configs/inter_generalisation/algorithmic.yaml \
        --model-path checkpoints/.../huggingface [--category algorithmic] [--output-dir results] [--resume]

Writes results.json, summary.md and scores.png to <output_dir>/<run>/. The work is done by
rg_verl.evaluation; this script only passes the arguments on.
"""

import sys

from rg_verl.evaluation.cli import main

if __name__ == "__main__":
    sys.exit(main())
