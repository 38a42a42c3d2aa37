"""The ``rg-verl`` console command: one subcommand per script, each calling the code that script calls.

    rg-verl train    [--config-path DIR] [--config-name NAME] [key=value ...]   # train_grpo.py
    rg-verl evaluate --config YAML [--model-path DIR] ...                      # evaluation/evaluate_model.py
    rg-verl convert  <ckpt>/global_step_N/actor <out_dir> [name] ...           # utils/load_fsdp_to_hf.py
    rg-verl demo     <model_dir> [--max-tokens N] ...                          # ask a model questions
    rg-verl export   [--config-path DIR] [--config-name NAME] --split S --out DIR  # utils/export_split.py
    rg-verl migrate-config OLD.yaml -o NEW.yaml [--overwrite]   # a reasoning-gym training config -> ours
    rg-verl oreo collect --config-path DIR --config-name NAME --out DIR ...  # utils/collect_trajectories.py
    rg-verl oreo train   [--config-path DIR] [--config-name NAME] [key=value ...]  # train_oreo.py
    rg-verl oreo rft     --trajectories DIR --model-path M --out DIR [key=value ...]  # the RFT baseline
    rg-verl oreo iterate --config YAML [key=value ...]                         # iterated OREO
    rg-verl compare      --config YAML [key=value ...]                         # GRPO vs OREO vs RFT

A subcommand's module is imported only when it runs, so ``rg-verl --help`` answers at once.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence

# subcommand -> ("module:function", or a module whose main it is, called as function(argv, prog) -> int; summary)
COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("rg_verl.grpo.cli", "train with GRPO through verl (as train_grpo.py)"),
    "evaluate": ("rg_verl.evaluation.cli",
                 "evaluate a model on reasoning-gym datasets (as evaluation/evaluate_model.py)"),
    "convert": ("rg_verl.checkpoint.cli", "FSDP checkpoint -> Hugging Face model (as utils/load_fsdp_to_hf.py)"),
    "demo": ("rg_verl.evaluation.cli:demo", "ask a model questions or reasoning-gym items, from a terminal or a pipe"),
    "export": ("rg_verl.data.cli", "write a split of a config to parquet in verl's RLHF layout (--hf: datasets)"),
    "migrate-config": ("rg_verl.migrate.cli",
                       "a config of reasoning-gym's training scripts -> an rg-verl config, and what has no equivalent"),
    "oreo": ("rg_verl.oreo.cli", "OREO: collect scored trajectories, train a policy and a value model; RFT"),
    "compare": ("rg_verl.compare.cli", "GRPO, OREO and RFT from one model with one sample budget: a table, a plot"),
}


def _parser() -> argparse.ArgumentParser:
    width = max(map(len, COMMANDS))
    listing = "\n".join(f"  {name:<{width}} {summary}" for name, (_, summary) in COMMANDS.items())
    parser = argparse.ArgumentParser(
        prog="rg-verl", description="GRPO training on reasoning-gym tasks with verl.",
        epilog=f"commands:\n{listing}\n\n'rg-verl <command> --help' shows a command's options.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    parser.add_argument("command", choices=list(COMMANDS), metavar="command", help="one of: " + ", ".join(COMMANDS))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs ``rg-verl <command> [args]``. Returns the command's exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        _parser().print_help(sys.stderr)
        return 2
    if argv[0] not in COMMANDS:
        _parser().parse_args(argv[:1])  # help, or a usage error that names the commands; exits
        return 2
    return command(argv[0])(argv[1:], prog=f"rg-verl {argv[0]}") or 0


def command(name: str) -> Callable[..., int]:
    """The function of subcommand ``name`` (its module is imported here)."""
    module, _, function = COMMANDS[name][0].partition(":")
    return getattr(importlib.import_module(module), function or "main")


if __name__ == "__main__":
    sys.exit(main())
