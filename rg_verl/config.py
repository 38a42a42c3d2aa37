"""rg-verl's own config sections, declared once; :func:`validate` checks them before Ray or any model starts.

- ``reasoning_gym`` (:class:`ReasoningGymConfig`): mixes, seeds, split sizes, prompt, curriculum, weights;
- ``reward.custom_reward_function.reward_kwargs`` (:class:`RewardConfig`): mode and extra terms;
- ``tiny_model`` (:func:`tiny_model_config`): the CPU path's local model, its sizes and warm start;
- the model path, verl's V1 trainer, and the plugin module paths (a moved one names its new path).

Each field is declared with :func:`rg_verl.common.schema.option` (default, one-line help, limits); the help is
the comment above the field in ``rg_verl/conf/rg_verl_base.yaml``. Cross-field checks are each class's
``validate(where)``. Every error is a :class:`ConfigError` naming the field, the bad value and the fix.
Nothing here reads a data file (of the data layer, only the shapes of ``rg_verl.data.formats`` are
imported): :func:`rg_verl.data.files.check_sources` reads them, right after this.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf
from reasoning_gym.factory import CURRICULA, DATASETS, create_curriculum

from rg_verl.common.names import GATES, MAX_SEED, MAX_SPLIT_SIZE, MODES, MOVED_MODULES, TERM_NAMES
from rg_verl.common.schema import (
    ConfigError,
    check,
    check_keys,
    check_model_path,
    check_module_path,
    named_mappings,
    option,
    parse_section,
    plain,
)
from rg_verl.cpu.tiny_model import TinyModelConfig
from rg_verl.data.formats import FileSource, check_curriculum_levels, check_filter, parse_source
from rg_verl.data.generators import check_generator_config, dataset_name_error
from rg_verl.grpo import guards

# ConfigError, check_keys and check_model_path (rg_verl.common.schema), MOVED_MODULES (rg_verl.common.names) and
# dataset_name_error (rg_verl.data.generators) are re-exported
__all__ = [
    "AdaptiveWeightsConfig", "CurriculumConfig", "DatasetSpec", "ReasoningGymConfig", "ReferenceTermsConfig",
    "RewardConfig", "ConfigError", "MOVED_MODULES", "check_keys", "check_model_path", "dataset_name_error",
    "tiny_model_config", "validate"
]

SOURCE_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*$")
REWARD_KWARGS = "reward.custom_reward_function.reward_kwargs"

# the config keys that name one of our modules for verl to load
PLUGIN_PATHS = ("data.custom_cls.path", "reward.custom_reward_function.path")


def _parse_source(where: str, value: Any) -> FileSource | None:
    return None if value is None else parse_source(where, value)


# ---- the reasoning_gym section


@dataclass
class DatasetSpec:
    """One dataset of a mix: ``reasoning_gym.datasets.<name>`` (or ``val_datasets.<name>``)."""

    weight: float = option(1.0, "share of the mix, relative to the other datasets' weights", low=0.0)
    config: dict = option({}, "keyword arguments of the dataset's reasoning-gym config class (seed and size are ours)")
    source: FileSource | None = option(
        None, "read the items from a file instead: {format, train, val, eval} (GSM8K, MATH)", parse=_parse_source
    )

    def validate(self, where: str) -> None:
        if self.source is not None:
            check_filter(f"{where}.config", self.source.format, self.config)
            return
        for reserved in ("seed", "size"):
            if reserved in self.config:
                raise ConfigError(
                    f"{where}.config.{reserved}: set by rg-verl; use reasoning_gym.seed / "
                    "reasoning_gym.<split>_size instead"
                )


def _parse_mix(where: str, value: Any) -> dict[str, DatasetSpec]:
    """A mix: reasoning-gym datasets, and file datasets (with a ``source``), sorted by name."""
    value = plain(value)
    if not isinstance(value, dict) or not value:
        raise ConfigError(f"{where}: needs at least one dataset, e.g. {{chain_sum: {{weight: 1.0}}}}")
    mix = {}
    for name in sorted(value):  # sorted: the mix does not depend on the config's key order
        section = value[name] or {}
        if not isinstance(section, dict):
            raise ConfigError(f"{where}.{name}: expected {{weight, config}}, got {section!r}")
        spec = parse_section(DatasetSpec, section, f"{where}.{name}")
        if spec.source is None:
            check_generator_config(f"{where}.{name}", str(name), spec.config)
        elif not SOURCE_NAME.match(str(name)):
            raise ConfigError(
                f"{where}.{name}: {name!r} cannot name a file dataset; use letters, digits, '_', '.', '-'"
            )
        mix[name] = spec
    if not any(spec.weight > 0 for spec in mix.values()):
        raise ConfigError(f"{where}: every weight is 0; give at least one dataset a positive weight")
    return mix


def _parse_val_mix(where: str, value: Any) -> dict[str, DatasetSpec]:
    return _parse_mix(where, value) if plain(value) else {}


def _parse_levels(where: str, value: Any) -> dict[str, dict[str, Any]]:
    """``{dataset: {attribute: level}}``; its names and levels are checked against the mix."""
    return named_mappings(where, value, "{dataset: {attribute: level}}", "{attribute: level}")


@dataclass
class CurriculumConfig:
    """``reasoning_gym.curriculum``: difficulty levels driven by reasoning-gym's own curricula.

    Only the datasets listed in ``levels`` follow a curriculum; each must be in
    ``reasoning_gym.datasets`` and have a reasoning-gym curriculum (or be a file dataset with levels).
    """

    enabled: bool = option(False, "turn the curriculum on (needs data.dataloader_num_workers=0)")
    levels: dict[str, dict[str, int]] = option(
        {}, 'dataset -> {attribute: starting level}; "*" sets every attribute', parse=_parse_levels
    )
    last_k: int = option(32, "a dataset's success rate is taken over its last_k training samples", low=1, high=10**6)
    min_samples: int = option(16, "no level change before the window holds this many samples", low=1, high=10**6)
    success_threshold: float = option(0.7, "success rate above which the level rises", low=0.0, high=1.0)
    failure_threshold: float = option(0.1, "success rate below which the level falls", low=0.0, high=1.0)
    schedule_every: int = option(0, "> 0: raise the level every this many steps instead, whatever the scores", low=0)

    def validate(self, where: str) -> None:
        if self.min_samples > self.last_k:
            raise ConfigError(f"{where}.min_samples: {self.min_samples} exceeds last_k={self.last_k}; lower it")
        if not self.failure_threshold < self.success_threshold:
            raise ConfigError(
                f"{where}: need failure_threshold < success_threshold <= 1, got "
                f"{self.failure_threshold} and {self.success_threshold}"
            )
        if self.enabled and not self.levels:
            raise ConfigError(f"{where}.levels: the curriculum is enabled but lists no dataset; add levels")


def _check_generator_levels(where: str, name: str, levels: dict) -> None:
    """Curriculum levels of a reasoning-gym dataset: its curriculum's attributes, within their levels."""
    if name not in CURRICULA:
        raise ConfigError(f"{where}: reasoning-gym has no curriculum for this dataset")
    attributes = create_curriculum(name).attributes
    for attribute, level in levels.items():
        if attribute != "*" and attribute not in attributes:
            raise ConfigError(f"{where}.{attribute}: unknown attribute; valid: *, {', '.join(attributes)}")
        # "*" sets every attribute: it may reach the level of the attribute with the most levels
        reached = attributes.values() if attribute == "*" else [attributes[attribute]]
        check(f"{where}.{attribute}", int, level, low=0, high=max(len(a.levels) for a in reached) - 1)


@dataclass
class AdaptiveWeightsConfig:
    """``reasoning_gym.adaptive_weights``: re-weight the training mix toward informative datasets.

    The rule (``rg_verl.data.curriculum.adaptive_weights``): with ``b`` the configured weights
    (normalised) and ``p`` each dataset's success rate over its window, the weight is
    ``floor * b + (1 - floor) * b * p(1-p) / sum(b * p(1-p))``. A dataset with fewer than
    ``min_samples`` results counts as p = 0.5 (most informative) until it is measured.
    """

    enabled: bool = option(False, "turn adaptive weights on (needs data.dataloader_num_workers=0)")
    window: int = option(
        64, "a dataset's success rate is taken over its last window training samples", low=1, high=10**6
    )
    min_samples: int = option(8, "below this many samples a dataset counts as success rate 0.5", low=1, high=10**6)
    floor: float = option(0.2, "share of its configured weight every dataset keeps, in [0, 1]", low=0.0, high=1.0)


@dataclass
class ReasoningGymConfig:
    """The ``reasoning_gym`` section: the mixes of each split, their seeds and sizes, the prompt."""

    datasets: dict[str, DatasetSpec] = option(
        {}, "dataset name -> {weight, config, source}: the training mix", parse=_parse_mix
    )
    seed: int = option(
        42, "base seed; train, validation and evaluation derive their own seed spaces from it", low=0, high=MAX_SEED
    )
    train_size: int = option(10000, "items in one training epoch", low=1, high=MAX_SPLIT_SIZE["train"])
    val_size: int = option(200, "items in the validation split", low=1, high=MAX_SPLIT_SIZE["val"])
    eval_size: int = option(200, "items in the evaluation split", low=1, high=MAX_SPLIT_SIZE["eval"])
    system_prompt: str | None = option("default", "a key of reasoning_gym.utils.SYSTEM_PROMPTS, or literal text")
    val_datasets: dict[str, DatasetSpec] = option(
        {}, "the validation and evaluation mix, same shape as datasets; empty: the training mix", parse=_parse_val_mix
    )
    curriculum: CurriculumConfig = option(
        CurriculumConfig, "difficulty levels from reasoning-gym's curricula, driven by training success"
    )
    adaptive_weights: AdaptiveWeightsConfig = option(
        AdaptiveWeightsConfig, "re-weight the training mix toward datasets with success rate near 0.5"
    )

    @classmethod
    def from_section(cls, section: Any, where: str = "reasoning_gym") -> ReasoningGymConfig:
        """Parse and check the section (the shape of file sources too; their files are not read)."""
        section = plain(section)
        if not isinstance(section, dict):
            raise ConfigError(f"{where}: missing; add a reasoning_gym section with at least 'datasets'")
        return parse_section(cls, section, where)

    def validate(self, where: str) -> None:
        if not self.datasets:
            raise ConfigError(f"{where}.datasets: needs at least one dataset, e.g. {{chain_sum: {{weight: 1.0}}}}")
        for name, levels in self.curriculum.levels.items():
            at = f"{where}.curriculum.levels.{name}"
            if name not in self.datasets:
                raise ConfigError(f"{at}: not in reasoning_gym.datasets; add it there or remove it")
            spec = self.datasets[name]
            if spec.source is not None:
                check_curriculum_levels(at, spec.source, spec.config, levels)
            else:
                _check_generator_levels(at, name, levels)

    def mix(self, split: str) -> dict[str, DatasetSpec]:
        """The datasets a split draws from."""
        return self.datasets if split == "train" or not self.val_datasets else self.val_datasets

    def size(self, split: str) -> int:
        return getattr(self, f"{split}_size")  # train_size, val_size or eval_size


# ---- reward.custom_reward_function.reward_kwargs

def _term_map(where: str, value: Any, noun: str, example: str, item: Any) -> dict[str, Any]:
    """A mapping of registered term names to values that ``item(where, value)`` checks."""
    value = plain(value) or {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: {value!r} is not a mapping; set {{term: {noun}}}, e.g. {example}")
    for name in value:
        if name not in TERM_NAMES:
            raise ConfigError(f"{where}.{name}: unknown reward term; valid terms: {', '.join(sorted(TERM_NAMES))}")
    return {name: item(f"{where}.{name}", entry) for name, entry in value.items()}


def _parse_terms(where: str, value: Any) -> dict[str, float]:
    return _term_map(where, value, "weight", "{format: 0.2}", lambda w, weight: check(w, float, weight))


def _gate(where: str, gate: Any) -> str:
    if gate not in GATES:
        raise ConfigError(f"{where}: {gate!r} is not a gate; valid gates: {', '.join(GATES)}")
    return gate


def _parse_gates(where: str, value: Any) -> dict[str, str]:
    gates = _term_map(where, value, "gate", "{format: correct}", _gate)
    return {name: gate for name, gate in gates.items() if gate != "none"}


def _parse_math_datasets(where: str, value: Any) -> list[str]:
    value = plain(value) or []
    if not isinstance(value, list | tuple):
        raise ConfigError(f"{where}: {value!r} is not a list; set dataset names, e.g. [chain_sum]")
    for name in value:
        if name not in DATASETS:
            raise dataset_name_error(where, str(name))
    return list(value)


@dataclass
class ReferenceTermsConfig:
    """``reward_kwargs.reference_terms``: the options of the ``reference_*`` terms (``rg_verl.reward.terms``).

    Those terms are reasoning-gym's own training rewards; they count characters, so they need no tokenizer.
    """

    max_output_length: int = option(
        1024, "characters at which reference_length reaches its full value", low=1, high=10**9
    )
    preappend_thinking_token: bool = option(
        False, "reference_format puts <think> before the response first (for prompts that end in <think>)"
    )


@dataclass
class RewardConfig:
    """``reward.custom_reward_function.reward_kwargs``: the keyword arguments of ``rg_verl.reward.compute_score``."""

    mode: str = option(
        "lenient",
        "the extraction that gives the reward: strict (exactly <think>…</think><answer>…</answer>) or lenient "
        "(the last <answer>)",
        choices=MODES,
        noun="mode",
    )
    terms: dict[str, float] = option(
        {},
        "extra terms added to correctness, name -> weight (rg_verl/reward/terms.py); 0 disables a term",
        parse=_parse_terms,
    )
    gates: dict[str, str] = option(
        {},
        "when a term counts, name -> gate: none (every response), correct or incorrect (only when the answer is "
        "right, or wrong)",
        parse=_parse_gates,
    )
    tokenizer_path: str | None = option(
        None, "tokenizer for response lengths in tokens", doc_default="actor_rollout_ref.model.path"
    )
    max_response_length: int | None = option(
        None, "the response budget the length terms are relative to", low=1, doc_default="data.max_response_length"
    )
    math_datasets: list[str] = option(
        [],
        "reasoning-gym datasets scored by math-verify's symbolic equivalence instead of their own scorer",
        parse=_parse_math_datasets,
    )
    reference_terms: ReferenceTermsConfig = option(
        ReferenceTermsConfig, "options of the reference_format, reference_length and reference_cosine terms"
    )
    response_prefix: str = option(
        "auto",
        "text the chat template opens the assistant turn with (a thinking model's <think>), judged before the "
        "response by the format rules; auto: read off the tokenizer at tokenizer_path "
        "(rg_verl/common/chat_template.py)",
    )
    chat_template_kwargs: dict | None = option(
        None,
        "the chat-template arguments auto renders the template with",
        doc_default="data.apply_chat_template_kwargs",
    )

    @classmethod
    def from_section(cls, section: Any, where: str = REWARD_KWARGS) -> RewardConfig:
        """Parse and check ``reward_kwargs`` (a mapping, None for every default)."""
        return parse_section(cls, section, where)

    def validate(self, where: str) -> None:
        if (self.terms.get("length") or self.terms.get("cosine")) and not (
            self.tokenizer_path and self.max_response_length
        ):
            raise ConfigError(
                f"{where}: the length and cosine terms count tokens; set tokenizer_path and max_response_length "
                "(the reference_length and reference_cosine terms count characters and need neither)"
            )


# ---- the tiny_model section: declared by rg_verl.cpu.tiny_model (sizes) and rg_verl.cpu.warm_start (its options)


def _run_prompts(config: DictConfig) -> dict[str, Any]:
    """A warm start's prompts as the run draws them: the mix's generated datasets (files have none), its prompt."""
    mix = plain(OmegaConf.select(config, "reasoning_gym.datasets", default=None))
    prompt = OmegaConf.select(config, "reasoning_gym.system_prompt", default=None)
    prompts = {"system_prompt": prompt} if prompt else {}
    if isinstance(mix, dict):
        prompts["datasets"] = {n: (s or {}).get("config") or {} for n, s in mix.items() if not (s or {}).get("source")}
    return prompts


def tiny_model_config(config: DictConfig) -> TinyModelConfig:
    """The ``tiny_model`` section, checked (every default where it is absent).

    A warm start without ``datasets`` or ``system_prompt`` draws its prompts like the run does: from the
    datasets of ``reasoning_gym.datasets`` that reasoning-gym generates, and ``reasoning_gym.system_prompt``.
    Each warm-start dataset's config is checked by reasoning-gym, as a mix entry's is.
    """
    section = plain(config.get("tiny_model"))
    if isinstance(section, dict) and isinstance(section.get("warm_start"), dict):
        section["warm_start"] = {**_run_prompts(config), **section["warm_start"]}
    tiny = parse_section(TinyModelConfig, section, "tiny_model")
    for name, dataset_config in (tiny.warm_start.datasets if tiny.warm_start else {}).items():
        check_generator_config(f"tiny_model.warm_start.datasets.{name}", name, dataset_config)
    return tiny


# ---- the composed config


def validate(config: DictConfig) -> ReasoningGymConfig:
    """Check rg-verl's sections of a composed config; raise :class:`ConfigError` on the first problem."""
    if OmegaConf.select(config, "trainer.use_v1", default=True) is False:
        raise ConfigError("trainer.use_v1: False; rg-verl runs on verl's V1 trainer, remove trainer.use_v1=False")
    for key in PLUGIN_PATHS:
        check_module_path(key, OmegaConf.select(config, key, default=None), "rg_verl", MOVED_MODULES)
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
    builds_tiny = tiny_model_config(config).build_if_missing
    path = OmegaConf.select(config, "actor_rollout_ref.model.path")
    if not (builds_tiny and isinstance(path, str) and os.path.isabs(path)):
        check_model_path("actor_rollout_ref.model.path", path)
    return settings
