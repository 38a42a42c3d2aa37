"""The train command (``train_grpo.py``, ``rg-verl train``: :func:`main`) and :func:`compose_config`, the one
composition of a training config that it and :func:`rg_verl.api.train` share."""

import sys
from collections.abc import Sequence
from pathlib import Path

from omegaconf import DictConfig

from rg_verl.common import compose
from rg_verl.common.schema import ConfigError
from rg_verl.grpo.launch import main_task
from rg_verl.migrate.command import refuse_reference_schema

JOB_NAME = "train_grpo"  # Hydra names its log file after it

DESCRIPTION = "Train a model with GRPO on reasoning-gym tasks, through verl (the same run as train_grpo.py)."
EPILOG = """\
Any key=value override of the composed config works, as with train_grpo.py and verl's main_ppo:
  rg-verl train                                         # the CPU smoke config (configs/smoke/cpu.yaml)
  rg-verl train trainer.total_training_steps=10 reasoning_gym.train_size=256
  rg-verl train --config-path configs/inter_generalisation --config-name algorithmic_qwen_3b \\
      trainer.n_gpus_per_node=4 trainer.logger='[console]'
  rg-verl train --config-path configs/inter_generalisation --config-name algorithmic_qwen_3b +dry_run=true

+dry_run=true runs every check the run makes before Ray, prints the resolved config and a few training and
validation items, then exits.
Hydra's own options pass through: --cfg job (print the config), -m (multirun), --hydra-help.
A relative --config-path is looked up in the working directory, then in the repository root."""


def build_parser(prog: str = "rg-verl train"):
    """The train command's parser (:func:`rg_verl.common.compose.config_parser`)."""
    return compose.config_parser(prog, DESCRIPTION, EPILOG)


def hydra_argv(argv: Sequence[str], prog: str = "rg-verl train") -> list[str]:
    """Hydra's command line for ``argv``; exits with a usage error if the config folder cannot be found."""
    return compose.hydra_argv(build_parser(prog), argv, JOB_NAME)


def refuse_reference_file(config_dir: str, config_name: str) -> None:
    """:class:`ConfigError` naming ``rg-verl migrate-config`` for a file of reasoning-gym's own training scripts.

    Read as a file: Hydra cannot compose one (its defaults name verl's old config folder).
    """
    import yaml

    name = config_name if config_name.endswith(".yaml") else f"{config_name}.yaml"
    try:
        loaded = yaml.safe_load((Path(config_dir) / name).read_text())
    except (OSError, yaml.YAMLError):
        return
    refuse_reference_schema(loaded)


def compose_config(config_dir: str, config_name: str, overrides: Sequence[str] = ()) -> DictConfig:
    """The training config ``config_name`` of ``config_dir`` (absolute, or ``pkg://``) with ``overrides``.

    Raises :class:`ConfigError` for reasoning-gym's own configs or a YAML syntax error, else Hydra's errors.
    """
    refuse_reference_file(config_dir, config_name)
    return compose.compose(config_dir, config_name, overrides, job_name=JOB_NAME)


def main(argv: Sequence[str] | None = None, prog: str = "rg-verl train") -> int:
    """Runs :func:`rg_verl.grpo.launch.main_task` under Hydra; a bad config exits with one line. Returns 0."""
    args = hydra_argv(sys.argv[1:] if argv is None else argv, prog)
    if not any(arg in compose.HELP_FLAGS for arg in args):
        try:  # before Hydra, whose own report of these is a traceback
            compose_config(args[1], args[3], [arg for arg in args[4:] if "=" in arg and not arg.startswith("-")])
        except compose.YamlSyntaxError as error:
            sys.exit(str(error))
        except ConfigError as error:
            sys.exit(f"Invalid config: {error}")
        except Exception:  # noqa: BLE001 - Hydra reports everything else as it does under @hydra.main
            pass
    return compose.run_hydra(main_task, prog, args)
