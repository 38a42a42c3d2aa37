"""``rg-verl oreo <collect|train|rft|iterate>``: OREO's two steps, its baseline, and iterated OREO."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

SUBCOMMANDS = {
    "collect": ("rg_verl.oreo.collect", "sample and score K completions per item of a training config"),
    "train": ("rg_verl.oreo.launch", "train a policy and a value model with OREO (as train_oreo.py)"),
    "rft": ("rg_verl.oreo.rft", "rejection-sampling fine-tuning: verl's SFT trainer on the correct trajectories"),
    "iterate": ("rg_verl.compare.cli", "N rounds of collect, train, convert, evaluate; one table and one plot"),
}


def main(argv: Sequence[str] | None = None, prog: str = "rg-verl oreo") -> int:
    """Runs ``rg-verl oreo <subcommand> [args]``; returns its exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in SUBCOMMANDS:
        listing = "\n".join(f"  {name:<8} {summary}" for name, (_, summary) in SUBCOMMANDS.items())
        print(f"usage: {prog} <collect|train|rft|iterate> [args]\n\ncommands:\n{listing}", file=sys.stderr)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    module = importlib.import_module(SUBCOMMANDS[argv[0]][0])
    entry = module.main_iterate if argv[0] == "iterate" else module.main
    return entry(argv[1:], prog=f"{prog} {argv[0]}") or 0
