"""Command lines of the evaluation room: the evaluator's (:func:`main`) and ``rg-verl demo``'s (:func:`demo`)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from rg_verl.common.chat_template import AUTO, resolve_response_prefix
from rg_verl.common.compose import YamlSyntaxError
from rg_verl.common.names import MAX_SEED
from rg_verl.common.schema import ConfigError
from rg_verl.evaluation.backends import BACKENDS
from rg_verl.evaluation.config import ITEMS, load_config
from rg_verl.evaluation.decoding import DECODING_MODES
from rg_verl.evaluation.demo import DEFAULT_SEED, HELP, hf_generate, read_lines, run_demo
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
    except YamlSyntaxError as error:  # file:line:column: what is wrong, as an editor reads it
        print(error, file=sys.stderr)
        return 2
    except ConfigError as error:
        print(f"config error: {error}", file=sys.stderr)
        return 2
    print((run_dir / "summary.md").read_text())
    print(f"Results: {run_dir / 'results.json'}\nSummary: {run_dir / 'summary.md'}\nChart:   {run_dir / 'scores.png'}")
    return 0





def _json_object(text: str) -> dict:
    """A JSON object from the command line (argparse reports the error)."""
    try:
        value = json.loads(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"not JSON: {error}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object, e.g. '{\"enable_thinking\": false}'")
    return value


def parse_demo_args(argv: Sequence[str] | None = None, prog: str | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Ask a model free questions or reasoning-gym evaluation items, one line at a time from stdin.",
        epilog=HELP + "\n\nexample: printf ':item chain_sum 0\\nwhat is 7*6?\\n' | rg-verl demo outputs/.../hf",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("model_dir", help="a Hugging Face model folder (e.g. one rg-verl convert wrote) or hub id")
    parser.add_argument("--max-tokens", type=int, default=512, help="response budget in tokens (default 512)")
    parser.add_argument("--temperature", type=float, default=0.0, help="sampling temperature; 0 (default) is greedy")
    parser.add_argument(
        "--system-prompt",
        default="default",
        help="a key of reasoning-gym's SYSTEM_PROMPTS or literal text; '' for none (default: default)",
    )
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:1, ... (default: cuda if available)")
    parser.add_argument(
        "--chat-template-kwargs", type=_json_object, default={}, metavar="JSON",
        help="chat-template arguments, as training's data.apply_chat_template_kwargs, e.g. "
             """'{"enable_thinking": false}'""",
    )  # fmt: skip
    parser.add_argument(
        "--seed", type=int, default=DEFAULT_SEED, help=f"sampling and item seed (default {DEFAULT_SEED})"
    )
    args = parser.parse_args(argv)
    if args.max_tokens < 1:
        parser.error("--max-tokens must be at least 1")
    if args.temperature < 0:
        parser.error("--temperature must be 0 or more")
    if not 0 <= args.seed <= MAX_SEED:
        parser.error(f"--seed must be in [0, {MAX_SEED}]")  # the range of rg_verl.data.dataset's base seeds
    return args


def demo(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """``rg-verl demo``: loads the model and runs :func:`run_demo` on stdin. Returns the exit status."""
    args = parse_demo_args(argv, prog)
    path = Path(args.model_dir).expanduser()
    if not path.exists() and (path.is_absolute() or args.model_dir.startswith((".", "~")) or len(path.parts) > 2):
        print(f"cannot load a model from {args.model_dir!r}: no such folder", file=sys.stderr)
        return 1  # not a hub id (namespace/name) either
    import torch

    torch.manual_seed(args.seed)
    model = str(path) if path.exists() else args.model_dir
    try:
        generate = hf_generate(model, args.max_tokens, args.temperature, args.device, args.chat_template_kwargs)
    except (OSError, ValueError, RuntimeError) as error:  # no such model, not a causal LM, a bad device
        print(f"cannot load a model from {args.model_dir!r}: {error}", file=sys.stderr)
        return 1
    prefix = resolve_response_prefix(AUTO, model, args.chat_template_kwargs)
    interactive = sys.stdin.isatty()
    if interactive:
        print(f"{args.model_dir}: type a question, or :help", file=sys.stderr)
    try:
        return run_demo(read_lines(sys.stdin, sys.stderr if interactive else None), sys.stdout, generate,
                        system_prompt=args.system_prompt, seed=args.seed, response_prefix=prefix)  # fmt: skip
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
