"""``rg-verl train``: the Hydra task of ``train_grpo.py`` (:func:`rg_verl.launch.main_task`), run from the package.

Hydra resolves a relative ``--config-path`` against the file that declares ``@hydra.main`` (for a task
function in a package: against the package itself), never against the working directory. This command
therefore resolves the config folder itself and hands Hydra an absolute path:

1. no ``--config-path``: the repository's ``configs/smoke`` (found next to the ``rg_verl`` package);
2. an absolute path, or a ``pkg://`` one: as given;
3. a relative path: against the working directory first, then against the repository root, the folder
   ``train_grpo.py`` resolves it against. So ``--config-path configs/inter_generalisation`` works from
   the repository root like the script, and a config folder of your own works from where you stand.

Everything else (``key=value`` overrides, ``--cfg job``, ``-m``, ``--hydra-help``, ...) goes to Hydra unchanged.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import rg_verl

DEFAULT_CONFIG_DIR = Path("configs") / "smoke"
DEFAULT_CONFIG_NAME = "cpu"
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


def repo_root() -> Path:
    """The folder that holds the ``rg_verl`` package (the repository root of an editable install)."""
    return Path(rg_verl.__file__).resolve().parent.parent


def build_parser(prog: str = "rg-verl train") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        usage=f"{prog} [--config-path DIR] [--config-name NAME] [key=value ...]",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    parser.add_argument(
        "--config-path",
        "-cp",
        metavar="DIR",
        help="folder of the experiment config: relative to the working directory (then to the repository root), "
        "absolute, or pkg://... (default: the repository's configs/smoke)",
    )
    parser.add_argument(
        "--config-name",
        "-cn",
        metavar="NAME",
        default=DEFAULT_CONFIG_NAME,
        help=f"config file name in that folder, without .yaml (default: {DEFAULT_CONFIG_NAME})",
    )
    # Hydra's --cfg, declared here because its short form -c would otherwise read as an abbreviation of -cp/-cn
    parser.add_argument("--cfg", "-c", choices=("job", "hydra", "all"), help="print Hydra's config and exit")
    return parser


def resolve_config_dir(config_path: str | None, cwd: Path | None = None, root: Path | None = None) -> str:
    """The config folder Hydra should search, as an absolute path (or a ``pkg://`` one).

    Raises:
        FileNotFoundError: If the folder does not exist; the message says where it was looked for.
    """
    cwd = Path.cwd() if cwd is None else cwd
    root = repo_root() if root is None else root
    if config_path is None:
        default = root / DEFAULT_CONFIG_DIR
        if not default.is_dir():
            raise FileNotFoundError(
                f"the default config folder {default} does not exist (rg_verl is not installed from a checkout "
                "of the repository); pass --config-path DIR --config-name NAME"
            )
        return str(default)
    if config_path.startswith("pkg://"):
        return config_path
    path = Path(config_path).expanduser()
    candidates = [path] if path.is_absolute() else [cwd / path, root / path]
    for candidate in candidates:
        if candidate.is_dir():
            return str(candidate.resolve())
    looked = " or ".join(str(c) for c in dict.fromkeys(candidates))
    raise FileNotFoundError(f"config folder {config_path!r} not found (looked for {looked})")


def hydra_argv(argv: Sequence[str], prog: str = "rg-verl train") -> list[str]:
    """Hydra's command line for ``argv``: the config folder made absolute, everything else in order.

    Exits (argparse's usage error) if the config folder cannot be found.
    """
    parser = build_parser(prog)
    args, rest = parser.parse_known_args(list(argv))
    try:
        config_dir = resolve_config_dir(args.config_path)
    except FileNotFoundError as error:
        parser.error(str(error))
    named = any(arg.split("=", 1)[0] == "hydra.job.name" for arg in rest)
    cfg = ["--cfg", args.cfg] if args.cfg else []
    return ["--config-path", config_dir, "--config-name", args.config_name, *cfg, *rest] + (
        [] if named else [f"hydra.job.name={JOB_NAME}"]
    )


def main(argv: Sequence[str] | None = None, prog: str = "rg-verl train") -> int:
    """Runs the training task as ``train_grpo.py`` does. Returns 0; errors exit as Hydra's do."""
    import hydra
    from omegaconf import DictConfig

    from rg_verl.launch import main_task

    args = hydra_argv(sys.argv[1:] if argv is None else argv, prog)

    @hydra.main(config_path=None, config_name=DEFAULT_CONFIG_NAME, version_base=None)
    def task(config: DictConfig) -> None:
        main_task(config)

    saved = sys.argv
    sys.argv = [prog, *args]  # hydra.main reads its arguments from sys.argv
    try:
        task()
    finally:
        sys.argv = saved
    return 0
