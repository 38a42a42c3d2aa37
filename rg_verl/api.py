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
    """The config :func:`train` runs, composed as the train command composes it
    (:func:`rg_verl.grpo.cli.compose_config`).

    ``config_path`` is found as the commands find it (the working directory, then the repository root; default
    ``configs/smoke``); a ``pkg://`` path names a package.
    """
    # deliberately lazy, as every import of this module: `import rg_verl` loads no library
    from rg_verl.common.compose import resolve_config_dir
    from rg_verl.grpo.cli import compose_config

    return compose_config(resolve_config_dir(config_path), config_name, overrides)


def train(config_name: str = "cpu", config_path: str | None = None, overrides: Sequence[str] = ()) -> None:
    """GRPO through verl on the composed config (:func:`compose`), as ``train_grpo.py`` runs it.

    ``+dry_run=true`` among the overrides runs every check before Ray and prints sample items without training.

    Raises:
        rg_verl.common.schema.ConfigError: before Ray starts, on a config our checks refuse.
        rg_verl.grpo.stopping.RunStopped: a ``SystemExit`` whose ``line`` says why the run stopped early (a dead
            engine or server, SIGINT, SIGTERM) and how to resume.
    """
    # deliberately lazy: `import rg_verl` loads no library
    from rg_verl.grpo.launch import run

    run(compose(config_name, config_path, overrides))


def evaluate(config: str | os.PathLike | Mapping[str, Any], *, resume: bool = False, **overrides: Any) -> Path:
    """An evaluation run, as ``evaluation/evaluate_model.py`` makes it; returns its folder (results.json, ...).

    ``config`` is an evaluation YAML's path, or its fields as a dict; ``overrides`` replace fields
    (``model_path=...``, ``max_tokens=...``), as the command's options do (``category=...``, keeping one
    category, and ``decoding={...}`` work with a path).
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
    """A verl FSDP actor checkpoint (``<ckpt>/global_step_N/actor``) as a Hugging Face model folder, as
    ``utils/load_fsdp_to_hf.py`` writes it. ``options`` are :func:`rg_verl.checkpoint.convert.convert_checkpoint`'s
    (``dtype``, ``merge_lora``, ``verify``, ...); returns its :class:`~rg_verl.checkpoint.convert.ConversionResult`
    (``out_dir``, tensors and bytes written, ...)."""
    # deliberately lazy: `import rg_verl` loads no library
    from rg_verl.checkpoint.convert import convert_checkpoint

    return convert_checkpoint(checkpoint_dir, out_dir, **options)
