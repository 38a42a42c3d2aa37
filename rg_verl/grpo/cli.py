"""The train command: ``rg-verl train`` (:func:`main`), the same Hydra task as ``train_grpo.py``
(:func:`rg_verl.grpo.launch.main_task`).

``rg-verl train`` resolves the config folder itself, because Hydra resolves a relative ``--config-path`` against
the file that declares ``@hydra.main``, never against the working directory:

1. no ``--config-path``: the repository's ``configs/smoke`` (found next to the ``rg_verl`` package);
2. an absolute path, or a ``pkg://`` one: as given;
3. a relative path: against the working directory first, then against the repository root, the folder
   ``train_grpo.py`` resolves it against.

Everything else (``key=value`` overrides, ``--cfg job``, ``-m``, ``--hydra-help``, ...) goes to Hydra unchanged.
"""

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from rg_verl.common import compose
from rg_verl.common.schema import ConfigError
from rg_verl.grpo.launch import main_task
from rg_verl.migrate.command import refuse_reference_schema

# the job name train_grpo.py gets from its file name; Hydra names its log file after it
JOB_NAME = "train_grpo"

DESCRIPTION = "Train a model with GRPO on reasoning-gym tasks, through verl (the same run as train_grpo.py)."
EPILOG = """\
Any key=value override of the composed config works, as with train_grpo.py and verl's main_ppo:
  rg-verl train                                         # the CPU smoke config (configs/smoke/cpu.yaml)
  rg-verl train trainer.total_training_steps=10 reasoning_gym.train_size=256
  rg-verl train --config-path configs/inter_generalisation --config-name algorithmic_qwen_3b \\
      trainer.n_gpus_per_node=4 trainer.logger='[console]'
  rg-verl train --config-path configs/inter_generalisation --config-name algorithmic_qwen_3b +dry_run=true

+dry_run=true prints the resolved config and a few training and validation items, then exits.
Hydra's own options pass through: --cfg job (print the config), -m (multirun), --hydra-help.
A relative --config-path is looked up in the working directory, then in the repository root."""


def build_parser(prog: str = "rg-verl train") -> argparse.ArgumentParser:
    """The train command's parser: :func:`rg_verl.common.compose.config_parser` with its help."""
    return compose.config_parser(prog, DESCRIPTION, EPILOG)


def hydra_argv(argv: Sequence[str], prog: str = "rg-verl train") -> list[str]:
    """Hydra's command line for ``argv`` (:func:`rg_verl.common.compose.hydra_argv`); exits if the config folder
    cannot be found."""
    return compose.hydra_argv(build_parser(prog), argv, JOB_NAME)


def refuse_reference_file(args: Sequence[str]) -> None:
    """Exit naming ``rg-verl migrate-config`` when the config file of Hydra's ``args`` is in the reference's schema.

    Checked on the file, before Hydra: a reference config lists defaults Hydra cannot find (verl's old
    config folder), and Hydra's error would not say what the file is. An unreadable file is left to Hydra.
    """
    import yaml

    name = args[3] if args[3].endswith(".yaml") else f"{args[3]}.yaml"
    try:
        refuse_reference_schema(yaml.safe_load((Path(args[1]) / name).read_text()))
    except (OSError, yaml.YAMLError):
        return
    except ConfigError as error:
        sys.exit(f"Invalid config: {error}")


def refuse_before_hydra(argv: Sequence[str], prog: str = "train_grpo.py") -> None:
    """What ``train_grpo.py`` checks before its ``@hydra.main`` starts, as :func:`main` does: a YAML file of the
    config that does not parse exits with one line (:func:`rg_verl.common.compose.preflight`), a reference config
    names its converter (:func:`refuse_reference_file`). A help request or a usage error is left to Hydra."""
    if any(arg in compose.HELP_FLAGS for arg in argv):
        return
    args = compose.preflight(build_parser(prog), argv, JOB_NAME)
    if args is not None:
        refuse_reference_file(args)


def main(argv: Sequence[str] | None = None, prog: str = "rg-verl train") -> int:
    """Runs the training task as ``train_grpo.py`` does. Returns 0; errors exit as Hydra's do."""
    args = hydra_argv(sys.argv[1:] if argv is None else argv, prog)
    refuse_reference_file(args)
    return compose.run_hydra(main_task, prog, args)
