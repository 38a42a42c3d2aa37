"""The ``reasoning_gym`` section's schema and its datasets, checked by reasoning-gym's registry and config classes."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any

from reasoning_gym.factory import CURRICULA, DATASETS, create_curriculum

from rg_verl.common.names import MAX_SEED, MAX_SPLIT_SIZE
from rg_verl.common.schema import ConfigError, check, named_mappings, option, parse_section, plain
from rg_verl.data.formats import FileSource, check_curriculum_levels, check_filter, parse_source

__all__ = [
    "AdaptiveWeightsConfig", "CurriculumConfig", "DatasetSpec", "ReasoningGymConfig", "check_file_dataset_name",
    "check_generator_config", "dataset_name_error",
]  # fmt: skip

SOURCE_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*$")


def _parse_source(where: str, value: Any) -> FileSource | None:
    return None if value is None else parse_source(where, value)


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
        else:
            check_file_dataset_name(f"{where}.{name}", str(name))
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
    """``reasoning_gym.curriculum``: difficulty levels driven by reasoning-gym's own curricula."""

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
    """``reasoning_gym.adaptive_weights``: re-weight the training mix toward informative datasets."""

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
        return getattr(self, f"{split}_size")


def dataset_name_error(where: str, name: str) -> ConfigError:
    """The error for a name that is not a registered reasoning-gym dataset, with close matches."""
    close = difflib.get_close_matches(name, list(DATASETS), n=3)
    hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    return ConfigError(
        f"{where}: unknown reasoning-gym dataset {name!r}.{hint} "
        "The registered names are the keys of reasoning_gym.factory.DATASETS; "
        "a dataset read from a file (GSM8K, MATH) needs a 'source'."
    )


def dataset_names(where: str, value: Any) -> list[str]:
    """A list of registered reasoning-gym dataset names (a list, a tuple or an OmegaConf list)."""
    value = plain(value)
    if not isinstance(value, list | tuple):
        raise ConfigError(f"{where}: {value!r} is not a list of dataset names; set them, e.g. [chain_sum]")
    for i, name in enumerate(value):
        if name not in DATASETS:
            raise dataset_name_error(f"{where}[{i}]", str(name))
    return list(value)


def check_file_dataset_name(where: str, name: str) -> None:
    """A file dataset's name, which its items' ``data_source`` carries: letters, digits, ``_``, ``.``, ``-``."""
    if not SOURCE_NAME.match(name):
        raise ConfigError(f"{where}: {name!r} cannot name a file dataset; use letters, digits, '_', '.', '-'")


def check_generator_config(where: str, name: str, config: dict, config_at: str | None = None) -> None:
    """reasoning-gym's own check of a dataset's config: its config class, and its ``validate()``. An unknown
    ``name`` is named at ``where``, a rejected config at ``config_at`` (default ``<where>.config``)."""
    if name not in DATASETS:
        raise dataset_name_error(where, name)
    config_cls = DATASETS[name][1]
    try:
        instance = config_cls(**config)
        if hasattr(instance, "validate"):  # a few reasoning-gym configs have none
            instance.validate()
    except (TypeError, AssertionError, ValueError) as error:
        raise ConfigError(f"{config_at or where + '.config'}: reasoning-gym rejects {config}: {error}") from None
