"""Start an OREO run: ``train_oreo.py`` and ``rg-verl oreo train``; the config is checked before any model loads."""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
from collections.abc import Sequence
from pathlib import Path

from omegaconf import DictConfig

from rg_verl.common.compose import HELP_FLAGS, config_parser, exit_on_yaml_error, hydra_argv, preflight, run_hydra
from rg_verl.common.schema import ConfigError
from rg_verl.cpu.settings import OREO_CPU_SETTINGS, apply_settings, cpu_env
from rg_verl.oreo.checkpoints import ResumeError
from rg_verl.oreo.config import validate

__all__ = ["main", "main_hydra_task", "main_task", "prepare_process", "refuse_before_hydra", "single_process_env"]

DEFAULT_CONFIG_DIR = Path("configs") / "oreo"
DEFAULT_CONFIG_NAME = "smoke_cpu"

logger = logging.getLogger(__name__)


def single_process_env() -> None:
    """Without torchrun's variables, this process as rank 0 of 1 (on a free local port), as torchrun would set it."""
    if "WORLD_SIZE" in os.environ:
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(WORLD_SIZE="1", RANK="0", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))


def prepare_process(config: DictConfig) -> None:
    """This process's distributed environment and device: torchrun's, or rank 0 of 1; the CPU platform."""
    single_process_env()
    os.environ.setdefault("PYTHONHASHSEED", "0")
    if config.trainer.device == "cpu":
        apply_settings(config, OREO_CPU_SETTINGS)
        os.environ.update(cpu_env())
        # lazy: the CPU platform imports verl and registers itself with it; a GPU run must not import it
        import rg_verl.cpu.platform  # noqa: F401


def main_task(config: DictConfig) -> dict[str, float]:
    """Checks ``config``, prepares this process, trains; returns the last step's metrics."""
    settings = validate(config)
    prepare_process(config)
    # lazy: the trainer imports verl's engines, which must come after the platform is chosen
    from rg_verl.oreo.trainer import OreoTrainer

    trainer = OreoTrainer(config, settings)
    return trainer.fit()


def main_hydra_task(config: DictConfig) -> None:
    """The Hydra task of ``train_oreo.py`` and ``rg-verl oreo train``: a bad config exits with one line."""
    try:
        main_task(config)
    except ConfigError as error:
        sys.exit(f"Invalid config: {error}")
    except ResumeError as error:
        sys.exit(f"Cannot resume: {error}")


def build_parser(prog: str = "rg-verl oreo train") -> argparse.ArgumentParser:
    """The command's parser: :func:`rg_verl.common.compose.config_parser` with OREO's config folder."""
    description = "Train a policy and a value model with OREO on collected trajectories (as train_oreo.py)."
    return config_parser(prog, description, config_dir=DEFAULT_CONFIG_DIR, config_name=DEFAULT_CONFIG_NAME)


def refuse_before_hydra(argv: Sequence[str], prog: str = "train_oreo.py") -> None:
    """What ``train_oreo.py`` checks before ``@hydra.main``: a YAML file that does not parse exits with one line."""
    if not any(arg in HELP_FLAGS for arg in argv):
        preflight(build_parser(prog), argv, job_name="train_oreo")


def main(argv: Sequence[str] | None = None, prog: str = "rg-verl oreo train") -> int:
    """Runs the OREO task as ``train_oreo.py`` does. Returns 0; errors exit as Hydra's do."""
    args = hydra_argv(build_parser(prog), sys.argv[1:] if argv is None else argv, job_name="train_oreo")
    exit_on_yaml_error(args)
    return run_hydra(main_hydra_task, prog, args)
