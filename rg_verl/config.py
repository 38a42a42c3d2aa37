"""rg-verl's own config sections, as dataclasses, validated right after Hydra composes the config.

verl validates its sections itself; this module checks ours before Ray or any model starts:

- ``reasoning_gym`` (:class:`ReasoningGymConfig`): datasets, weights, seeds, split sizes, prompt;
- ``reward.custom_reward_function.reward_kwargs`` (:class:`RewardConfig`): mode and extra terms;
- the model path: a local directory or a hub id.

Every error is a :class:`ConfigError` that names the field, the bad value and the fix.
"""

import difflib
import math
import os
import re
from dataclasses import dataclass, field, fields
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from reasoning_gym.factory import DATASETS

from rg_verl.data.curriculum import LevelCurriculum
from rg_verl.data.files import FILE_SUFFIXES, FORMATS, HUB_KEYS, FileSource, MathFileDataset
from rg_verl.reward.terms import TERMS
from rg_verl.vocab import MAX_SPLIT_SIZE, MODES, SPLIT_STRIDE, SPLITS

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
SOURCE_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*$")


class ConfigError(ValueError):
    """A config field with a bad value; the message says which field, what is wrong and the fix."""


def _plain(value: Any) -> Any:
    if isinstance(value, (DictConfig, ListConfig)):
        return OmegaConf.to_container(value, resolve=True)
    return value


def check_keys(where: str, given: dict, cls: type, skip: tuple[str, ...] = ()) -> None:
    """Every key of ``given`` must be a field of dataclass ``cls`` (except ``skip``)."""
    valid = [f.name for f in fields(cls) if f.name not in skip]
    for key in given:
        if key not in valid:
            close = difflib.get_close_matches(str(key), valid, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            field_name = f"{where}.{key}" if where else str(key)
            raise ConfigError(f"{field_name}: unknown key{hint}; valid keys: {', '.join(valid)}")


def _number(where: str, value: Any, minimum: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{where}: {value!r} is not a finite number; set a number")
    if minimum is not None and value < minimum:
        raise ConfigError(f"{where}: {value} is below {minimum}; set a value >= {minimum}")
    return float(value)


def _integer(where: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(f"{where}: {value!r} is not an integer in [{low}, {high}]; set one")
    return value


def dataset_name_error(where: str, name: str) -> ConfigError:
    close = difflib.get_close_matches(name, list(DATASETS), n=3)
    hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    return ConfigError(
        f"{where}: unknown reasoning-gym dataset {name!r}.{hint} "
        "The registered names are the keys of reasoning_gym.factory.DATASETS; "
        "a dataset read from a file (GSM8K, MATH) needs a 'source'."
    )


@dataclass
class DatasetSpec:
    """One dataset of a mix.

    Args:
        weight: relative share of the mix (>= 0; at least one dataset of a mix > 0).
        config: keyword arguments for the dataset's reasoning-gym config class (its ``validate()``
            runs); ``seed`` and ``size`` are set by rg-verl.
    """

    weight: float = 1.0
    config: dict = field(default_factory=dict)
    source: FileSource | None = None


def _parse_file(where: str, value: Any) -> Any:
    """One split's file: a local path (checked to exist) or ``{hub, name, split}``."""
    if isinstance(value, dict):
        unknown = [key for key in value if key not in HUB_KEYS]
        if unknown or not isinstance(value.get("hub"), str) or not isinstance(value.get("split"), str):
            raise ConfigError(
                f"{where}: {value!r} is not a hub source; set {{hub: org/name, name: config, split: train}} "
                "(name is optional) or a local file path"
            )
        return dict(value)
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: {value!r} is not a file; set a local {'/'.join(FILE_SUFFIXES)} path")
    if not value.endswith(FILE_SUFFIXES):
        raise ConfigError(f"{where}: {value!r} is not a {', '.join(FILE_SUFFIXES)} file; convert it or point to one")
    if not os.path.isfile(os.path.expanduser(value)):
        raise ConfigError(
            f"{where}: {value!r} does not exist; download GSM8K and MATH with "
            "'python utils/download_math_data.py --out data' or point this field at your copy"
        )
    return value


def _parse_level_filter(where: str, layout: str, config: dict) -> None:
    """The ``config`` of a file dataset: only its format's keys (``math``: min/max level, types)."""
    for key in config:
        if key not in FORMATS[layout].config_keys:
            valid = ", ".join(FORMATS[layout].config_keys) or "none"
            raise ConfigError(f"{where}.{key}: unknown key for format {layout!r}; valid keys: {valid}")
    for key in ("min_level", "max_level"):
        if key in config:
            _integer(f"{where}.{key}", config[key], 0, 100)
    if config.get("min_level", 0) > config.get("max_level", 100):
        raise ConfigError(f"{where}: min_level {config['min_level']} exceeds max_level {config['max_level']}")
    types = config.get("types")
    if types is not None and (not isinstance(types, list) or not all(isinstance(t, str) for t in types)):
        raise ConfigError(f"{where}.types: {types!r} is not a list of names; set e.g. [Algebra, Geometry]")


def _parse_source(where: str, name: str, spec: dict, splits: tuple[str, ...]) -> FileSource:
    """The ``source`` of mix entry ``where``; its file of each split in ``splits`` is read here, so
    a missing column or an empty filter fails before training starts."""
    section, config = spec["source"], dict(spec.get("config") or {})
    if not isinstance(section, dict):
        raise ConfigError(f"{where}.source: expected {{format, train, val, eval}}, got {section!r}")
    if not SOURCE_NAME.match(name):
        raise ConfigError(f"{where}: {name!r} cannot name a file dataset; use letters, digits, '_', '.', '-'")
    unknown = [key for key in section if key not in ("format", *SPLITS)]
    if unknown:
        raise ConfigError(f"{where}.source.{unknown[0]}: unknown key; valid keys: format, {', '.join(SPLITS)}")
    layout = section.get("format")
    if layout not in FORMATS:
        raise ConfigError(f"{where}.source.format: {layout!r} is not a layout; set one of {', '.join(FORMATS)}")
    _parse_level_filter(f"{where}.config", layout, config)
    files = {split: _parse_file(f"{where}.source.{split}", section[split]) for split in SPLITS if section.get(split)}
    source = FileSource(format=layout, files=files)
    for split in splits:
        if source.file(split) is None:
            raise ConfigError(f"{where}.source.{split}: missing; set the {split} file of dataset {name!r}")
        try:
            MathFileDataset(name, source, split, config)
        except ValueError as error:
            raise ConfigError(f"{where}.source.{split}: {error}") from None
    return source


def _parse_mix(where: str, section: Any, splits: tuple[str, ...] = ()) -> dict[str, DatasetSpec]:
    """A mix: reasoning-gym datasets, and file datasets (with a ``source``) checked for ``splits``."""
    section = _plain(section)
    if not isinstance(section, dict) or not section:
        raise ConfigError(f"{where}: needs at least one dataset, e.g. {{chain_sum: {{weight: 1.0}}}}")
    mix = {}
    for name in sorted(section):  # sorted: the mix does not depend on the config's key order
        spec = section[name] or {}
        if not isinstance(spec, dict):
            raise ConfigError(f"{where}.{name}: expected {{weight, config}}, got {spec!r}")
        check_keys(f"{where}.{name}", spec, DatasetSpec)
        weight = _number(f"{where}.{name}.weight", spec.get("weight", 1.0), minimum=0.0)
        config = dict(spec.get("config") or {})
        if spec.get("source") is not None:
            source = _parse_source(f"{where}.{name}", name, spec, splits)
            mix[name] = DatasetSpec(weight=weight, config=config, source=source)
            continue
        if name not in DATASETS:
            raise dataset_name_error(f"{where}.{name}", name)
        for reserved in ("seed", "size"):
            if reserved in config:
                raise ConfigError(
                    f"{where}.{name}.config.{reserved}: set by rg-verl; use reasoning_gym.seed / "
                    "reasoning_gym.<split>_size instead"
                )
        config_cls = DATASETS[name][1]
        try:
            instance = config_cls(**config)
            if hasattr(instance, "validate"):  # a few reasoning-gym configs have none
                instance.validate()
        except (TypeError, AssertionError, ValueError) as error:
            raise ConfigError(f"{where}.{name}.config: reasoning-gym rejects {config}: {error}") from None
        mix[name] = DatasetSpec(weight=weight, config=config)
    if not any(spec.weight > 0 for spec in mix.values()):
        raise ConfigError(f"{where}: every weight is 0; give at least one dataset a positive weight")
    return mix


@dataclass
class CurriculumConfig:
    """``reasoning_gym.curriculum``: difficulty levels driven by reasoning-gym's own curricula.

    Args:
        enabled: turn the curriculum on.
        levels: dataset -> {attribute: starting level}; ``"*"`` sets every attribute. Only datasets
            listed here follow a curriculum; each must be in ``reasoning_gym.datasets`` and have a
            reasoning-gym curriculum.
        last_k: how many recent training samples of a dataset its success rate is taken over.
        min_samples: no level change before the window holds this many samples.
        success_threshold: a success rate at or above this raises the dataset's level.
        failure_threshold: a success rate at or below this lowers it.
        schedule_every: if > 0, raise every curriculum dataset's level every this many steps,
            whatever the scores (a fixed schedule instead of a score-driven one).
    """

    enabled: bool = False
    levels: dict[str, dict[str, int]] = field(default_factory=dict)
    last_k: int = 32
    min_samples: int = 16
    success_threshold: float = 0.7
    failure_threshold: float = 0.1
    schedule_every: int = 0

    @classmethod
    def from_section(cls, section: Any, mix: dict, where: str, read_files: bool = True) -> "CurriculumConfig":
        """Parse and check the section; with ``read_files``, file datasets' training files are read too."""
        from reasoning_gym.factory import CURRICULA, create_curriculum

        section = _plain(section) or {}
        check_keys(where, section, cls)
        config = cls(
            enabled=bool(section.get("enabled", cls.enabled)),
            levels={},
            last_k=_integer(f"{where}.last_k", section.get("last_k", cls.last_k), 1, 10**6),
            min_samples=_integer(f"{where}.min_samples", section.get("min_samples", cls.min_samples), 1, 10**6),
            success_threshold=_number(f"{where}.success_threshold", section.get("success_threshold", 0.7), 0.0),
            failure_threshold=_number(f"{where}.failure_threshold", section.get("failure_threshold", 0.1), 0.0),
            schedule_every=_integer(f"{where}.schedule_every", section.get("schedule_every", 0), 0, 10**9),
        )
        if config.min_samples > config.last_k:
            raise ConfigError(f"{where}.min_samples: {config.min_samples} exceeds last_k={config.last_k}; lower it")
        if not config.failure_threshold < config.success_threshold <= 1.0:
            raise ConfigError(
                f"{where}: need failure_threshold < success_threshold <= 1, got "
                f"{config.failure_threshold} and {config.success_threshold}"
            )
        for name, levels in (section.get("levels") or {}).items():
            if name not in mix:
                raise ConfigError(f"{where}.levels.{name}: not in reasoning_gym.datasets; add it there or remove it")
            if mix[name].source is not None:
                _check_file_levels(f"{where}.levels.{name}", mix[name], levels, read_files)
                config.levels[name] = dict(levels or {})
                continue
            if name not in CURRICULA:
                raise ConfigError(f"{where}.levels.{name}: reasoning-gym has no curriculum for this dataset")
            attributes = create_curriculum(name).attributes
            for attribute, level in (levels or {}).items():
                if attribute != "*" and attribute not in attributes:
                    raise ConfigError(
                        f"{where}.levels.{name}.{attribute}: unknown attribute; valid: *, {', '.join(attributes)}"
                    )
                top = max(len(a.levels) for a in attributes.values()) - 1
                top = top if attribute == "*" else len(attributes[attribute].levels) - 1
                _integer(f"{where}.levels.{name}.{attribute}", level, 0, top)
            config.levels[name] = dict(levels or {})
        if config.enabled and not config.levels:
            raise ConfigError(f"{where}.levels: the curriculum is enabled but lists no dataset; add levels")
        return config


def _check_file_levels(where: str, spec: DatasetSpec, levels: Any, read_files: bool) -> None:
    """Curriculum levels of a file dataset: ``{max_level: start}``, a level value (MATH: 1-5)."""
    if not FORMATS[spec.source.format].has_levels:
        raise ConfigError(f"{where}: format {spec.source.format!r} has no difficulty level to follow; remove it")
    low, high = LevelCurriculum.level_range(spec.config)
    for attribute, level in (levels or {}).items():
        if attribute not in ("*", LevelCurriculum.ATTRIBUTE):
            raise ConfigError(f"{where}.{attribute}: unknown attribute; valid: {LevelCurriculum.ATTRIBUTE}")
        _integer(f"{where}.{attribute}", level, low, high)
    if read_files and spec.source.file("train") is not None:
        # the curriculum can go down to the lowest level: training items must exist there
        try:
            MathFileDataset("curriculum", spec.source, "train", {**spec.config, "max_level": low})
        except ValueError:
            raise ConfigError(
                f"{where}: no training row has a level <= {low}, where the curriculum can go down to; "
                f"raise the dataset's config.min_level or loosen its filters"
            ) from None


@dataclass
class AdaptiveWeightsConfig:
    """``reasoning_gym.adaptive_weights``: re-weight the training mix toward informative datasets.

    The rule (see ``rg_verl.data.curriculum.adaptive_weights``): with ``b`` the configured weights
    (normalised) and ``p`` each dataset's success rate over its window, the weight is
    ``floor * b + (1 - floor) * b * p(1-p) / sum(b * p(1-p))``. A dataset with fewer than
    ``min_samples`` results counts as p = 0.5 (most informative) until it is measured.

    Args:
        enabled: turn adaptive weights on.
        window: how many recent samples of a dataset its success rate is taken over.
        min_samples: fewer samples than this count as p = 0.5.
        floor: the share of each dataset's configured weight it always keeps, in [0, 1].
    """

    enabled: bool = False
    window: int = 64
    min_samples: int = 8
    floor: float = 0.2

    @classmethod
    def from_section(cls, section: Any, where: str) -> "AdaptiveWeightsConfig":
        section = _plain(section) or {}
        check_keys(where, section, cls)
        floor = _number(f"{where}.floor", section.get("floor", cls.floor), 0.0)
        if floor > 1.0:
            raise ConfigError(f"{where}.floor: {floor} is above 1; set a share in [0, 1]")
        return cls(
            enabled=bool(section.get("enabled", cls.enabled)),
            window=_integer(f"{where}.window", section.get("window", cls.window), 1, 10**6),
            min_samples=_integer(f"{where}.min_samples", section.get("min_samples", cls.min_samples), 1, 10**6),
            floor=floor,
        )


@dataclass
class ReasoningGymConfig:
    """The ``reasoning_gym`` section.

    Args:
        datasets: dataset name -> :class:`DatasetSpec`; the training mix.
        val_datasets: the validation and evaluation mix; empty means the training mix.
        seed: base seed in [0, 1e9); the splits derive disjoint seed spaces from it.
        train_size: items in one training epoch.
        val_size: items in the validation split.
        eval_size: items in the evaluation split.
        system_prompt: a key of reasoning-gym's ``SYSTEM_PROMPTS``, literal text, or empty for none.
        curriculum: :class:`CurriculumConfig`.
        adaptive_weights: :class:`AdaptiveWeightsConfig`.
    """

    datasets: dict[str, DatasetSpec] = field(default_factory=dict)
    val_datasets: dict[str, DatasetSpec] = field(default_factory=dict)
    seed: int = 42
    train_size: int = 10000
    val_size: int = 200
    eval_size: int = 200
    system_prompt: str = "default"
    curriculum: CurriculumConfig = field(default_factory=CurriculumConfig)
    adaptive_weights: AdaptiveWeightsConfig = field(default_factory=AdaptiveWeightsConfig)

    @classmethod
    def from_section(
        cls, section: Any, where: str = "reasoning_gym", splits: tuple[str, ...] = ("train", "val")
    ) -> "ReasoningGymConfig":
        """Parse and check the section; the files of file datasets are read for each of ``splits``."""
        section = _plain(section)
        if not isinstance(section, dict):
            raise ConfigError(f"{where}: missing; add a reasoning_gym section with at least 'datasets'")
        check_keys(where, section, cls)
        val = section.get("val_datasets") or {}
        prompt = section.get("system_prompt", cls.system_prompt)
        if prompt is not None and not isinstance(prompt, str):
            raise ConfigError(f"{where}.system_prompt: {prompt!r} is not text; set a SYSTEM_PROMPTS key or text")
        # the training mix serves the other splits too when there is no validation mix
        train_splits = tuple(s for s in splits if s == "train" or not val)
        datasets = _parse_mix(f"{where}.datasets", section.get("datasets"), train_splits)
        val_splits = tuple(s for s in splits if s != "train")
        return cls(
            datasets=datasets,
            val_datasets=_parse_mix(f"{where}.val_datasets", val, val_splits) if val else {},
            seed=_integer(f"{where}.seed", section.get("seed", cls.seed), 0, SPLIT_STRIDE - 1),
            train_size=_integer(f"{where}.train_size", section.get("train_size", cls.train_size), 1, MAX_SPLIT_SIZE),
            val_size=_integer(f"{where}.val_size", section.get("val_size", cls.val_size), 1, MAX_SPLIT_SIZE),
            eval_size=_integer(f"{where}.eval_size", section.get("eval_size", cls.eval_size), 1, MAX_SPLIT_SIZE),
            system_prompt=prompt or "",
            curriculum=CurriculumConfig.from_section(
                section.get("curriculum"), datasets, f"{where}.curriculum", read_files="train" in splits
            ),
            adaptive_weights=AdaptiveWeightsConfig.from_section(
                section.get("adaptive_weights"), f"{where}.adaptive_weights"
            ),
        )

    def mix(self, split: str) -> dict[str, DatasetSpec]:
        """The datasets a split draws from."""
        return self.datasets if split == "train" or not self.val_datasets else self.val_datasets

    def size(self, split: str) -> int:
        return {"train": self.train_size, "val": self.val_size, "eval": self.eval_size}[split]


@dataclass
class RewardConfig:
    """``reward.custom_reward_function.reward_kwargs``: the keyword arguments of ``rg_verl.reward.compute_score``.

    Args:
        mode: the extraction that gives the reward, ``strict`` or ``lenient``.
        terms: extra term name -> weight (``rg_verl.reward.terms.TERMS``).
        tokenizer_path: tokenizer for response lengths in tokens.
        max_response_length: the token budget the length terms are relative to.
        math_datasets: reasoning-gym datasets scored by math-verify's equivalence instead.
    """

    mode: str = "lenient"
    terms: dict[str, float] = field(default_factory=dict)
    tokenizer_path: str | None = None
    max_response_length: int | None = None
    math_datasets: list[str] = field(default_factory=list)

    @classmethod
    def from_section(cls, section: Any, where: str = "reward.custom_reward_function.reward_kwargs") -> "RewardConfig":
        section = _plain(section) or {}
        check_keys(where, section, cls)
        mode = section.get("mode", cls.mode)
        if mode not in MODES:
            raise ConfigError(f"{where}.mode: {mode!r} is not a mode; set one of {', '.join(MODES)}")
        terms = {}
        for name, weight in (section.get("terms") or {}).items():
            if name not in TERMS:
                raise ConfigError(f"{where}.terms.{name}: unknown reward term; valid terms: {', '.join(sorted(TERMS))}")
            terms[name] = _number(f"{where}.terms.{name}", weight)
        math_datasets = list(section.get("math_datasets") or [])
        for name in math_datasets:
            if name not in DATASETS:
                raise dataset_name_error(f"{where}.math_datasets", name)
        config = cls(mode, terms, section.get("tokenizer_path"), section.get("max_response_length"), math_datasets)
        if (terms.get("length") or terms.get("cosine")) and not (config.tokenizer_path and config.max_response_length):
            raise ConfigError(
                f"{where}: the length and cosine terms count tokens; set tokenizer_path and max_response_length"
            )
        return config


def check_model_path(where: str, path: Any) -> None:
    """A model path must be an existing local directory or look like a hub id (``org/name``)."""
    if not isinstance(path, str) or not path:
        raise ConfigError(f"{where}: {path!r} is not a model path; set a local directory or a hub id like org/name")
    if os.path.isdir(path) or (HUB_ID.match(path) and not os.path.isabs(path) and not os.path.exists(path)):
        return
    raise ConfigError(
        f"{where}: {path!r} is neither a local model directory nor a hub id (org/name); "
        "fix the path or download the model first"
    )


def validate(config: DictConfig) -> ReasoningGymConfig:
    """Check rg-verl's sections of a composed config; raise :class:`ConfigError` on the first problem."""
    rg = ReasoningGymConfig.from_section(config.get("reasoning_gym"))
    workers = OmegaConf.select(config, "data.dataloader_num_workers", default=0)
    if (rg.curriculum.enabled or rg.adaptive_weights.enabled) and workers:
        raise ConfigError(
            f"data.dataloader_num_workers: {workers} copies the dataset into worker processes, where the "
            "curriculum's changes would not reach it; set data.dataloader_num_workers=0"
        )
    reward_fn = OmegaConf.select(config, "reward.custom_reward_function")
    if reward_fn is not None and str(reward_fn.get("path", "")).startswith("pkg://rg_verl.reward"):
        RewardConfig.from_section(reward_fn.get("reward_kwargs"))
    builds_tiny = OmegaConf.select(config, "tiny_model.build_if_missing", default=False)
    path = OmegaConf.select(config, "actor_rollout_ref.model.path")
    if not (builds_tiny and isinstance(path, str) and os.path.isabs(path)):
        check_model_path("actor_rollout_ref.model.path", path)
    return rg
