"""A whole composed config checked before Ray or any model starts (:func:`validate`)."""

from __future__ import annotations

import os
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rg_verl import guards
from rg_verl.common.models import ContextLength, check_model_path, context_length
from rg_verl.common.schema import ConfigError, check_module_path, parse_section, plain
from rg_verl.cpu.tiny_model import TinyModelConfig
from rg_verl.data.config import ReasoningGymConfig, check_generator_config
from rg_verl.reward.config import RewardConfig

__all__ = ["model_context", "tiny_model_config", "validate"]

PLUGIN_PATHS = ("data.custom_cls.path", "reward.custom_reward_function.path")


def _run_prompts(config: DictConfig) -> dict[str, Any]:
    """A warm start's prompts as the run draws them: the mix's generated datasets (files have none), its prompt."""
    mix = plain(OmegaConf.select(config, "reasoning_gym.datasets", default=None))
    prompt = OmegaConf.select(config, "reasoning_gym.system_prompt", default=None)
    prompts = {"system_prompt": prompt} if prompt else {}
    if isinstance(mix, dict):
        prompts["datasets"] = {n: (s or {}).get("config") or {} for n, s in mix.items() if not (s or {}).get("source")}
    return prompts


def tiny_model_config(config: DictConfig) -> TinyModelConfig:
    """The ``tiny_model`` section, checked (every default where it is absent)."""
    section = plain(config.get("tiny_model"))
    if isinstance(section, dict) and isinstance(section.get("warm_start"), dict):
        section["warm_start"] = {**_run_prompts(config), **section["warm_start"]}
    tiny = parse_section(TinyModelConfig, section, "tiny_model")
    for name, dataset_config in (tiny.warm_start.datasets if tiny.warm_start else {}).items():
        check_generator_config(f"tiny_model.warm_start.datasets.{name}", name, dataset_config)
    return tiny


def model_context(path: str, tiny: TinyModelConfig | None = None) -> ContextLength | None:
    """The context length of the model at ``path``: its local config's, else the ``tiny`` model's, else None."""
    if (found := context_length(path)) is None and tiny is not None:
        positions = tiny.max_position_embeddings
        return ContextLength(positions, f"tiny_model.max_position_embeddings {positions}, the tiny model rg-verl "
                             "builds there", positions)  # fmt: skip
    return found


def validate(config: DictConfig) -> ReasoningGymConfig:
    """Check rg-verl's sections of a composed config; raise :class:`ConfigError` on the first problem."""
    if OmegaConf.select(config, "trainer.use_v1", default=True) is False:
        raise ConfigError("trainer.use_v1: False; rg-verl runs on verl's V1 trainer, remove trainer.use_v1=False")
    for key in PLUGIN_PATHS:
        check_module_path(key, OmegaConf.select(config, key, default=None), "rg_verl")
    settings = ReasoningGymConfig.from_section(config.get("reasoning_gym"))
    workers = OmegaConf.select(config, "data.dataloader_num_workers", default=0)
    if (settings.curriculum.enabled or settings.adaptive_weights.enabled) and workers:
        raise ConfigError(
            f"data.dataloader_num_workers: {workers} copies the dataset into worker processes, where the "
            "curriculum's changes would not reach it; set data.dataloader_num_workers=0"
        )
    guards.check(config)  # what verl 0.9.1 accepts and then gets wrong
    reward_fn = OmegaConf.select(config, "reward.custom_reward_function")
    if reward_fn is not None and str(reward_fn.get("path", "")).startswith("pkg://rg_verl.reward"):
        RewardConfig.from_section(reward_fn.get("reward_kwargs"))
    tiny = tiny_model_config(config)
    path = OmegaConf.select(config, "actor_rollout_ref.model.path")
    builds_tiny = tiny.build_if_missing and isinstance(path, str) and os.path.isabs(path)
    if not builds_tiny:
        check_model_path("actor_rollout_ref.model.path", path)
    guards.check_context_length(config, model_context(path, tiny if builds_tiny else None))
    return settings
