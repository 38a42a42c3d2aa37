"""``rg-verl compare`` and ``rg-verl oreo iterate``: a comparison config, checked, then run stage by stage."""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from rg_verl.common.compose import YamlSyntaxError
from rg_verl.common.schema import ConfigError
from rg_verl.compare.config import load, only_oreo
from rg_verl.compare.run import Comparison
from rg_verl.compare.stages import StageError

__all__ = ["main", "main_iterate"]


def _parse(argv: Sequence[str], prog: str) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="a comparison YAML, e.g. configs/compare/learn_cpu.yaml")
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="delete the config's out folder (a comparison's, from an earlier run) and start afresh",
    )
    parser.add_argument("overrides", nargs="*", help="key=value overrides of the config's fields")
    args = parser.parse_args(list(argv))
    return args, args.overrides


def _run(argv: Sequence[str], prog: str, oreo_only: bool) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args, overrides = _parse(argv, prog)
    try:
        config = load(args.config, overrides)
        if oreo_only:
            config = only_oreo(config)
        if args.fresh:
            clear(Path(config.out))
        comparison = Comparison(config)
        table = comparison.run()
    except YamlSyntaxError as error:  # file:line:column: what is wrong, as an editor reads it
        print(error, file=sys.stderr)
        return 2
    except ConfigError as error:
        print(f"config error: {error}", file=sys.stderr)
        return 2
    except StageError as error:
        print(error, file=sys.stderr)
        return 1
    print(table.read_text())
    print(f"Table: {table}\nRows:  {table.with_suffix('.json')}\nPlot:  {table.with_suffix('.png')}")
    if comparison.reward_curve.is_file():
        print(f"GRPO's training reward, step by step: {comparison.reward_curve}")
    return 0


def clear(out: Path) -> None:
    """Delete ``out``, the folder of an earlier comparison; refuse (``ConfigError``) a folder that is not one."""
    if not out.exists():
        return
    if not out.is_dir() or not (out / "logs").is_dir():
        raise ConfigError(
            f"out: --fresh deletes the last comparison's folder, and {out} is not one (it has no logs/); "
            "choose another out, or delete it yourself"
        )
    shutil.rmtree(out)


def main(argv: Sequence[str] | None = None, prog: str = "rg-verl compare") -> int:
    return _run(sys.argv[1:] if argv is None else argv, prog, oreo_only=False)


def main_iterate(argv: Sequence[str] | None = None, prog: str = "rg-verl oreo iterate") -> int:
    return _run(sys.argv[1:] if argv is None else argv, prog, oreo_only=True)
