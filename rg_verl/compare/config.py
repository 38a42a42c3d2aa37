"""A comparison's YAML (``configs/compare/``): the start, the budget, each method's config, the evaluation."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rg_verl.common.compose import yaml_config
from rg_verl.common.schema import ConfigError, option, parse_section, plain
from rg_verl.evaluation.backends import BACKENDS

__all__ = ["DECODINGS", "METHODS", "REFERENCES", "CompareConfig", "Plan", "load", "plan"]

METHODS = ("grpo", "oreo", "rft")
# greedy is sampling at temperature 0; the value modes read the OREO critic of the same round
DECODINGS = ("sample", "greedy", "value_beam", "value_rerank")
# the reference policy of OREO's round r > 1: the starting model, or the round's own starting policy
REFERENCES = ("start", "previous")


@dataclass(frozen=True)
class TrainingConfig:
    """A Hydra training config: its folder, its name and ``key=value`` overrides."""

    config_path: str = option("configs/smoke", "the config folder (relative to the working directory)")
    config_name: str = option("learn", "the config's name in that folder")
    overrides: list[str] = option([], "key=value overrides of the config's fields")


@dataclass(frozen=True)
class OreoArm:
    """OREO's training config and rounds (``rg-verl oreo iterate`` runs this arm alone)."""

    config_path: str = option("configs/oreo", "the OREO config folder")
    config_name: str = option("learn_cpu", "the OREO training config")
    overrides: list[str] = option([], "key=value overrides of the OREO config")
    rounds: int = option(1, "collect → train → convert → evaluate this many times, each from the last policy", low=1)
    reference: str = option(
        "start", "the reference policy of rounds after the first: start (the starting model) or previous "
        "(the round's starting policy)", choices=REFERENCES, noun="reference",
    )  # fmt: skip


@dataclass(frozen=True)
class RftArm:
    """Rejection-sampling fine-tuning on OREO's first collection (``rg-verl oreo rft``)."""

    reward_key: str = option("accuracy", "the reward column a correct trajectory is chosen by")
    min_reward: float = option(1.0, "a trajectory is correct when that column is at least this")
    per_item: int | None = option(None, "at most this many correct trajectories per item; none: all", low=1)
    overrides: list[str] = option([], "key=value overrides of verl's SFT config (sft_trainer_engine.yaml)")


@dataclass(frozen=True)
class EvaluationArm:
    """How every trained model (and the start) is evaluated."""

    config: str = option("evaluation/configs/learn_cpu.yaml", "the evaluation YAML (datasets, sampling, backend)")
    decodings: list[str] = option(
        ["sample", "greedy", "value_rerank"], "decoding modes: sample, greedy; value_beam, value_rerank (OREO rows)"
    )


@dataclass(frozen=True)
class CompareConfig:
    """One comparison."""

    out: str = option("outputs/compare", "every stage's output goes under this folder")
    device: str = option("cpu", "cpu (rg-verl's CPU path) or cuda", choices=("cpu", "cuda"), noun="device")
    gpus: int = option(
        1, "cuda: GPUs on this node (torchrun processes for OREO and RFT, GRPO's n_gpus_per_node)", low=1
    )
    backend: str = option("hf", "OREO's collection backend: hf, vllm (GPUs) or openai", choices=tuple(BACKENDS),
                          noun="backend")  # fmt: skip
    budget: int = option(384, "generated samples each method trains on", low=1)
    samples: int = option(8, "OREO and RFT: completions collected per item", low=1)
    val_items: int = option(32, "held-out items collected with each round (the value model's AUC)", low=0)
    max_tokens: int = option(32, "collection: the response budget in tokens", low=1)
    seed: int = option(42, "collection seed of round 1 (round r uses seed + r - 1)")
    methods: list[str] = option(list(METHODS), "the methods to run: grpo, oreo, rft")
    train: TrainingConfig = option(TrainingConfig, "the GRPO config: the dataset mix, the reward, the model")
    oreo: OreoArm = option(OreoArm, "OREO")
    rft: RftArm = option(RftArm, "rejection-sampling fine-tuning")
    evaluation: EvaluationArm = option(EvaluationArm, "the evaluation")

    def validate(self, where: str) -> None:
        for name in self.methods:
            if name not in METHODS:
                raise ConfigError(f"{where}.methods: {name!r} is not a method; use some of {', '.join(METHODS)}")
        if "rft" in self.methods and "oreo" not in self.methods:
            raise ConfigError(f"{where}.methods: rft trains on OREO's first collection; list oreo too")
        for name in self.evaluation.decodings:
            if name not in DECODINGS:
                raise ConfigError(
                    f"{where}.evaluation.decodings: {name!r} is not a decoding; use some of {', '.join(DECODINGS)}"
                )
        if self.budget % (self.oreo.rounds * self.samples) and "oreo" in self.methods:
            raise ConfigError(
                f"{where}.budget: {self.budget} samples do not split into {self.oreo.rounds} round(s) of whole "
                f"items of {self.samples} samples; set a multiple of {self.oreo.rounds * self.samples}"
            )


@dataclass(frozen=True)
class Plan:
    """What each method runs, derived from the config: GRPO's steps, OREO's items per round."""

    grpo_steps: int
    items_per_round: int
    start_model: str


def load(path: str | os.PathLike, overrides: list[str] | None = None) -> CompareConfig:
    """The checked comparison config of the YAML at ``path`` with ``key=value`` ``overrides``."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such comparison config; pass --config with a YAML of configs/compare/")
    return parse_section(CompareConfig, plain(yaml_config(path, overrides or [])), "")


def _grpo_steps(config: CompareConfig, train: Any) -> int:
    per_step = int(train.data.train_batch_size) * int(train.actor_rollout_ref.rollout.n)
    if config.budget % per_step:
        raise ConfigError(
            f"budget: {config.budget} samples are not whole GRPO steps of data.train_batch_size x rollout.n = "
            f"{per_step} samples; set a multiple of {per_step}"
        )
    return config.budget // per_step


def plan(config: CompareConfig, train: Any) -> Plan:
    """The budget split for the composed GRPO config ``train``; raises :class:`ConfigError` naming the field."""
    steps = _grpo_steps(config, train) if "grpo" in config.methods else 0
    items = config.budget // (config.oreo.rounds * config.samples)
    return Plan(grpo_steps=steps, items_per_round=items, start_model=str(train.actor_rollout_ref.model.path))


def only_oreo(config: CompareConfig) -> CompareConfig:
    """The config of ``rg-verl oreo iterate``: the OREO arm alone."""
    return replace(config, methods=["oreo"])
