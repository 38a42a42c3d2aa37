"""Command line of the evaluator (``evaluation/evaluate_model.py`` calls :func:`main`)."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from rg_verl.common.schema import ConfigError
from rg_verl.evaluation.backends import BACKENDS
from rg_verl.evaluation.config import ITEMS, load_config
from rg_verl.evaluation.decoding import DECODING_MODES
from rg_verl.evaluation.runner import evaluate

logger = logging.getLogger(__name__)

# the options that replace the config's field of the same name (category: keep only that category)
OVERRIDES = (
    "output_dir", "model_path", "backend", "run_name", "batch_size", "device", "category", "items", "temperature",
    "max_tokens",
)  # fmt: skip


def parse_args(argv: Sequence[str] | None = None, prog: str | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=prog, description="Evaluate a model on reasoning-gym datasets (see docs/evaluation.md)."
    )
    parser.add_argument("--config", required=True, help="evaluation YAML, e.g. evaluation/configs/smoke.yaml")
    parser.add_argument(
        "overrides", nargs="*", metavar="key=value",
        help="overrides of the config's fields, as rg-verl compare and train take them (eval_repeats=4, "
        "decoding.beam_width=3); the options below apply after them",
    )  # fmt: skip
    parser.add_argument("--output-dir", help="replaces the config's output_dir")
    parser.add_argument("--category", help="evaluate only this category of the config")
    parser.add_argument(
        "--resume", action="store_true", help="finish the latest (or --run-name) run, skipping finished items"
    )
    parser.add_argument("--model-path", help="replaces the config's model_path (e.g. a converted checkpoint)")
    parser.add_argument("--backend", choices=list(BACKENDS), help="replaces the config's backend")
    parser.add_argument("--run-name", help="the run folder's name under output_dir")
    parser.add_argument("--batch-size", type=int, help="replaces the config's batch_size (hf backend)")
    parser.add_argument("--device", help="replaces the config's device (hf backend), e.g. cpu or cuda:0")
    parser.add_argument("--temperature", type=float, help="replaces the config's temperature; 0 is greedy")
    parser.add_argument("--max-tokens", type=int, help="replaces the config's max_tokens (the response budget)")
    parser.add_argument("--items", choices=list(ITEMS), help="replaces the config's items: split or reference")
    parser.add_argument("--decoding", choices=list(DECODING_MODES), help="replaces the config's decoding.mode")
    parser.add_argument("--value-model", help="replaces the config's decoding.value_model (a converted OREO critic)")
    parser.add_argument("--verbose", action="store_true", help="debug logging")
    return parser.parse_intermixed_args(argv)


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """Parses arguments, runs the evaluation and prints summary.md. Returns the exit status."""
    args = parse_args(argv, prog)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO, format="%(levelname)s %(name)s: %(message)s"
    )
    try:
        decoding = {key: value for key, value in (("mode", args.decoding), ("value_model", args.value_model)) if value}
        overrides = {name: getattr(args, name) for name in OVERRIDES}
        config = load_config(args.config, args.overrides, **overrides, decoding=decoding)
        run_dir = evaluate(config, resume=args.resume)
    except ConfigError as error:
        print(f"config error: {error}", file=sys.stderr)
        return 2
    print((run_dir / "summary.md").read_text())
    print(f"Results: {run_dir / 'results.json'}\nSummary: {run_dir / 'summary.md'}\nChart:   {run_dir / 'scores.png'}")
    return 0
