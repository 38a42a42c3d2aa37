"""The Python API: what ``train_grpo.py``, ``evaluation/evaluate_model.py`` and ``utils/load_fsdp_to_hf.py`` run,
callable from a script or a notebook (``rg_verl.train``, ``rg_verl.evaluate``, ``rg_verl.convert``)::

    import rg_verl

    rg_verl.train("cpu", overrides=["trainer.total_training_steps=2"])  # configs/smoke/cpu.yaml
    model = rg_verl.convert("outputs/rg_verl_smoke/cpu/global_step_2/actor", "outputs/hf").out_dir
    run_dir = rg_verl.evaluate("evaluation/configs/smoke.yaml", model_path=str(model))

Each takes the commands' arguments and raises where the command would exit: a bad config is a
:class:`rg_verl.common.schema.ConfigError` (a ``ValueError`` naming the field and the fix), raised before Ray starts.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["compose", "convert", "evaluate", "train"]


def compose(config_name: str = "cpu", config_path: str | None = None, overrides: Sequence[str] = ()) -> Any:
    """The config :func:`train` runs, composed (and ``config_path`` found) as the train command does it."""
    # deliberately lazy, as every import of this module: `import rg_verl` loads no library
    from rg_verl.common.compose import resolve_config_dir
    from rg_verl.grpo.cli import compose_config

    return compose_config(resolve_config_dir(config_path), config_name, overrides)


def train(config_name: str = "cpu", config_path: str | None = None, overrides: Sequence[str] = ()) -> None:
    """GRPO through verl on the composed config (:func:`compose`), as ``train_grpo.py`` runs it.

    Raises a ``ConfigError`` before Ray starts, or :class:`rg_verl.grpo.stopping.RunStopped` (a ``SystemExit``
    whose ``line`` says why the run stopped early and how to resume).
    """
    # deliberately lazy: `import rg_verl` loads no library
    from rg_verl.grpo.launch import run

    run(compose(config_name, config_path, overrides))


def evaluate(config: str | os.PathLike | Mapping[str, Any], *, resume: bool = False, **overrides: Any) -> Path:
    """An evaluation run, as ``evaluation/evaluate_model.py`` makes it; returns its folder (results.json, ...).

    ``config``: an evaluation YAML's path, or its fields; ``overrides`` replace fields, as the command's options do.
    """
    # deliberately lazy: `import rg_verl` loads no library
    from rg_verl.evaluation.config import load_config, parse_config
    from rg_verl.evaluation.runner import evaluate as run_evaluation

    if isinstance(config, Mapping):
        loaded = parse_config({**config, **{k: v for k, v in overrides.items() if v is not None}})
    else:
        loaded = load_config(config, **overrides)
    return run_evaluation(loaded, resume=resume)


def convert(checkpoint_dir: str | os.PathLike, out_dir: str | os.PathLike, **options: Any) -> Any:
    """:func:`rg_verl.checkpoint.convert.convert_checkpoint`, as ``utils/load_fsdp_to_hf.py`` runs it."""
    # deliberately lazy: `import rg_verl` loads no library
    from rg_verl.checkpoint.convert import convert_checkpoint

    return convert_checkpoint(checkpoint_dir, out_dir, **options)
