"""The migrate-config command: ``rg-verl migrate-config OLD.yaml -o NEW.yaml``."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from rg_verl.common.compose import yaml_error
from rg_verl.common.schema import ConfigError
from rg_verl.migrate.command import COMMAND, migrate, render, write_config


def build_parser(prog: str = COMMAND) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Convert a config of reasoning-gym's training scripts (its reasoning_gym, curriculum and reward "
        "sections, verl's old ppo_trainer layout) into an rg-verl config, and list what has no equivalent.",
        epilog="Then: rg-verl train --config-path <NEW's folder> --config-name <NEW's name> +dry_run=true",
    )
    parser.add_argument("old", metavar="OLD.yaml", help="the reference-schema config")
    parser.add_argument("-o", "--out", metavar="NEW.yaml", required=True, help="where to write the rg-verl config")
    parser.add_argument("--overwrite", action="store_true", help="replace NEW.yaml if it exists")
    return parser


def main(argv: Sequence[str] | None = None, prog: str = COMMAND) -> int:
    """Runs ``rg-verl migrate-config``. Returns 0, or 1 after a one-line error; a usage error exits with 2."""
    import yaml
    from omegaconf import OmegaConf

    args = build_parser(prog).parse_args(sys.argv[1:] if argv is None else argv)
    out = Path(args.out)
    try:
        if out.exists() and not args.overwrite:
            raise FileExistsError(f"{out} exists; pass --overwrite to replace it")
        old = OmegaConf.to_container(OmegaConf.load(args.old), resolve=False)
        if isinstance(old, Mapping) and "rg_verl_base" in (old.get("defaults") or []):
            raise ConfigError(f"{args.old} is already an rg-verl config (its defaults list rg_verl_base)")
        new, unmapped = migrate(old)
        write_config(out, render(new, unmapped, source=os.path.basename(args.old)), overwrite=args.overwrite)
    except yaml.YAMLError as error:
        print(yaml_error(error, args.old), file=sys.stderr)  # file:line:column: what is wrong
        return 1
    except (OSError, ValueError) as error:  # ConfigError is a ValueError
        print(f"error: {args.old}: {error}", file=sys.stderr)
        return 1
    print(f"wrote {out}")
    if unmapped:
        print(f"{len(unmapped)} key{'s' if len(unmapped) != 1 else ''} not carried over, or not exactly:")
        for key, why in unmapped:
            print(f"  {key}: {why}")
    print(f"check it: rg-verl train --config-path {out.parent} --config-name {out.stem} +dry_run=true")
    return 0


if __name__ == "__main__":
    sys.exit(main())
