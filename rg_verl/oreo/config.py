"""The ``oreo``, ``data`` and ``trainer`` sections of an OREO config, checked before any model loads."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rg_verl.common.models import check_model_path
from rg_verl.common.schema import ConfigError, option, parse_section, plain

__all__ = [
    "ACTOR_INIT", "KL_TYPES", "OreoConfig", "OreoDataConfig", "OreoRewardConfig", "OreoTrainerConfig", "OreoSettings",
    "validate", "world_size",
]  # fmt: skip

VARIANTS = ("token", "step", "response")
# verl's kl_penalty estimators that need only the sampled tokens' log-probs
KL_TYPES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")
ACTOR_INIT = "actor_init"
RESUME_MODES = ("auto", "disable", "resume_path")


@dataclass(frozen=True)
class OreoRewardConfig:
    """What R is: one reward column of the trajectory files, transformed as ``value * mul + add``."""

    key: str = option("accuracy", "the reward column R comes from: accuracy (0/1) or score (with shaping terms)")
    mul: float = option(1.0, "R = column * mul + add (OREO's rew_mul); -1 with add 1 flips the reward")
    add: float = option(0.0, "R = column * mul + add (OREO's rew_add)")
    permute_seed: int | None = option(
        None, "a negative control: rewards permuted across trajectories with this seed; none: as collected"
    )


@dataclass(frozen=True)
class OreoConfig:
    """The OREO method (Wang et al. 2024, "Offline Reinforcement Learning for LLM Multi-Step Reasoning")."""

    variant: str = option(
        "token",
        "policy loss: token (Eq. 9), step (one action per reasoning step) or response (Eq. 10)",
        choices=VARIANTS,
        noun="variant",
    )
    beta: float = option(0.03, "KL-regularisation strength of the soft Bellman equation", low=0.0, high=100.0)
    alpha: float = option(0.01, "weight of the policy's KL regulariser to the reference", low=0.0, high=100.0)
    kl_type: str = option(
        "low_var_kl",
        "KL estimator on the trajectory tokens (verl's kl_penalty names)",
        choices=KL_TYPES,
        noun="KL estimator",
    )
    step_delimiters: list[str] = option(
        ["\n"], "the step variant: a step ends after a token whose text holds one of these"
    )
    reward: OreoRewardConfig = option(OreoRewardConfig, "the reward R")
    balance: int | None = option(
        None,
        "keep at most this many right and wrong samples per question, right <= max(wrong, 1); none: all",
        low=1,
    )
    reference: str = option(
        ACTOR_INIT,
        "the reference policy: actor_init (the actor's starting weights, OREO's choice) or a model folder "
        "(iterated OREO: the first round's policy for every round)",
    )
    zero_value_head: bool = option(True, "start the value head at zero, so V = 0 everywhere (OREO's choice)")

    def validate(self, where: str) -> None:
        if self.variant == "step" and not [d for d in self.step_delimiters if d]:
            raise ConfigError(f"{where}.step_delimiters: the step variant needs at least one non-empty delimiter")


@dataclass(frozen=True)
class OreoDataConfig:
    """The trajectory files and how they are batched."""

    train_files: list[str] = option([], "trajectory files: collection split folders (<out>/train) or parquet files")
    val_files: list[str] = option(
        [], "held-out trajectory files (<out>/val); the value AUC is measured on them every test_freq steps"
    )
    train_batch_size: int = option(128, "trajectories per optimizer step, over all ranks", low=1)
    micro_batch_size_per_gpu: int = option(4, "trajectories per forward/backward on one rank", low=1)
    max_length: int = option(2048, "longer prompt + response trajectories are left out (with a warning)", low=2)
    shuffle: bool = option(True, "shuffle the trajectories each epoch")
    seed: int = option(1, "seed of the epoch order")

    def validate(self, where: str) -> None:
        if not self.train_files:
            raise ConfigError(f"{where}.train_files: no trajectory files; set the folder rg-verl oreo collect wrote")


@dataclass(frozen=True)
class OreoTrainerConfig:
    """Steps, logging, checkpoints and the device of an OREO run."""

    project_name: str = option("rg_verl_oreo", "tracker project name")
    experiment_name: str = option("oreo", "tracker experiment name")
    default_local_dir: str = option(
        "checkpoints/rg_verl_oreo/oreo", "checkpoints go to <dir>/global_step_N/{actor,critic}"
    )
    total_epochs: int = option(1, "passes over the training trajectories", low=1)
    total_training_steps: int | None = option(None, "stop after this many steps; none: total_epochs", low=1)
    logger: list[str] = option(["console"], "verl tracking backends: console, file, wandb, ...")
    save_freq: int = option(-1, "save every this many steps (and at the end); -1: only at the end", low=-1)
    test_freq: int = option(-1, "measure on data.val_files every this many steps (and at the end); -1: never", low=-1)
    max_ckpt_to_keep: int | None = option(None, "keep only the newest this many checkpoints; none: all", low=1)
    resume_mode: str = option(
        "auto",
        "auto: continue from the newest checkpoint in default_local_dir; disable; resume_path",
        choices=RESUME_MODES,
        noun="resume mode",
    )
    resume_from_path: str | None = option(None, "with resume_mode=resume_path: a global_step_N folder")
    device: str = option(
        "cuda", "cuda (verl's GPU engines) or cpu (rg-verl's CPU platform)", choices=("cuda", "cpu"), noun="device"
    )
    seed: int = option(1, "torch seed of the run")

    def validate(self, where: str) -> None:
        if self.resume_mode == "resume_path" and not self.resume_from_path:
            raise ConfigError(f"{where}.resume_from_path: resume_mode=resume_path needs a global_step_N folder")


@dataclass(frozen=True)
class OreoSettings:
    """The checked sections of one OREO config."""

    oreo: OreoConfig
    data: OreoDataConfig
    trainer: OreoTrainerConfig


def world_size() -> int:
    """Ranks of this run: torchrun's ``WORLD_SIZE``, 1 without it."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def _model_config(where: str, path: str) -> dict[str, Any]:
    config = Path(path) / "config.json"
    if not config.is_file():
        return {}
    try:
        return json.loads(config.read_text())
    except (OSError, ValueError) as error:
        raise ConfigError(
            f"{where}: {config} is not readable JSON ({error}); point the path at a model folder"
        ) from error


def _check_models(config: DictConfig, ranks: int) -> None:
    actor, critic = config.actor.model.path, config.critic.model.path
    check_model_path("actor.model.path", actor)
    check_model_path("critic.model.path", critic)
    actor_config = _model_config("actor.model.path", actor)
    if config.trainer.device == "cpu" and ranks > 1 and actor_config.get("tie_word_embeddings"):
        # measured: the actor's gradient norm on two gloo ranks came out 5x that of one rank on the same batch,
        # and the weights after the step differed; with the same weights untied, the two runs agree exactly
        raise ConfigError(
            f"actor.model.path: {actor} ties its input and output embeddings (tie_word_embeddings), and verl's "
            "FSDP2 engine computes wrong gradients for tied weights over several gloo ranks; run on one CPU rank, "
            "or untie the embeddings (save the model with tie_word_embeddings=false and lm_head copied)"
        )
    actor_vocab = actor_config.get("vocab_size")
    critic_vocab = _model_config("critic.model.path", critic).get("vocab_size")
    if actor_vocab is not None and critic_vocab is not None and actor_vocab != critic_vocab:
        raise ConfigError(
            f"critic.model.path: the value model's vocabulary ({critic_vocab} tokens, {critic}) differs from the "
            f"policy's ({actor_vocab}, {actor}); start the value model from the policy's model"
        )
    reference = config.oreo.get("reference", ACTOR_INIT)
    if reference != ACTOR_INIT:
        check_model_path("oreo.reference", reference)
        reference_vocab = _model_config("oreo.reference", reference).get("vocab_size")
        if actor_vocab is not None and reference_vocab is not None and actor_vocab != reference_vocab:
            raise ConfigError(
                f"oreo.reference: the reference policy's vocabulary ({reference_vocab} tokens, {reference}) differs "
                f"from the actor's ({actor_vocab}, {actor}); use a model of the same family, or actor_init"
            )


def _check_batch(data: OreoDataConfig, ranks: int) -> None:
    per_step = ranks * data.micro_batch_size_per_gpu
    if data.train_batch_size % per_step:
        raise ConfigError(
            f"data.train_batch_size: {data.train_batch_size} trajectories do not split into {ranks} rank(s) x "
            f"data.micro_batch_size_per_gpu={data.micro_batch_size_per_gpu}; set a multiple of {per_step}"
        )


def _check_verl_sections(config: DictConfig) -> None:
    for role in ("actor", "critic"):
        for group in ("model", "engine", "optim"):
            if OmegaConf.select(config, f"{role}.{group}") is None:
                raise ConfigError(
                    f"{role}.{group}: missing; list rg_verl's oreo_base in the config's defaults "
                    "(defaults: [oreo_base, _self_]) with hydra.searchpath [pkg://verl.trainer.config, pkg://rg_verl.conf]"
                )
    if config.trainer.device == "cpu":
        for role in ("actor", "critic"):
            if config[role].engine.strategy != "fsdp2":
                raise ConfigError(f"{role}.engine.strategy: a CPU run needs fsdp2 (FSDP1 cannot hold CPU modules)")


def validate(config: DictConfig, ranks: int | None = None) -> OreoSettings:
    """Checks an OREO config before anything is loaded; raises :class:`ConfigError` naming the field."""
    settings = OreoSettings(
        oreo=parse_section(OreoConfig, plain(config.get("oreo")), "oreo"),
        data=parse_section(OreoDataConfig, plain(config.get("data")), "data"),
        trainer=parse_section(OreoTrainerConfig, plain(config.get("trainer")), "trainer"),
    )
    _check_verl_sections(config)
    _check_batch(settings.data, world_size() if ranks is None else ranks)
    _check_models(config, world_size() if ranks is None else ranks)
    for field in ("train_files", "val_files"):
        for i, path in enumerate(getattr(settings.data, field)):
            if not os.path.exists(path):
                raise ConfigError(f"data.{field}[{i}]: {path} does not exist; run rg-verl oreo collect first")
    return settings


def verl_sections(section: DictConfig) -> dict[str, Any]:
    """The model, engine and optim groups of an ``actor`` or ``critic`` section, as verl's dataclasses."""
    from verl.utils.config import omega_conf_to_dataclass

    return {group: omega_conf_to_dataclass(section[group]) for group in ("model", "engine", "optim")}
