"""The evaluation config: one YAML file, a superset of reasoning-gym's ``training/evaluations`` YAMLs, checked
field by field before any model loads (:func:`load_config`); docs/evaluation.md lists the fields."""

from __future__ import annotations

import difflib
import importlib.util
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

from reasoning_gym.utils import SYSTEM_PROMPTS

from rg_verl.common.compose import yaml_config
from rg_verl.common.models import check_model_path
from rg_verl.common.names import MAX_SEED, MAX_SPLIT_SIZE, MODES, system_prompt
from rg_verl.common.schema import (
    ConfigError, above_zero, maybe_text, option, parse_entry, parse_section, run_name, text,
)  # fmt: skip
from rg_verl.data.config import DatasetSpec, check_file_dataset_name, check_generator_config, dataset_names
from rg_verl.data.formats import check_filter, parse_source
from rg_verl.data.reference_questions import ReferenceTraining
from rg_verl.evaluation.backends import BACKENDS
from rg_verl.evaluation.decoding import DecodingConfig, check_value_model
from rg_verl.evaluation.metrics import default_k_values
from rg_verl.retry.episode import RetryConfig

__all__ = ["DatasetEntry", "CategoryEntry", "EvalConfig", "load_config", "parse_config", "check_runtime"]

DTYPES = ("auto", "float32", "bfloat16", "float16")
ROLES = ("system", "developer", "user")
MAX_SIZE = MAX_SPLIT_SIZE["eval"]
ITEMS = ("split", "reference")  # a generator entry's items: rg-verl's evaluation split, or reasoning-gym's own
_WORD = re.compile(r"^\w+$")
_URL = re.compile(r"^https?://")


@dataclass
class DatasetEntry:
    """One dataset to evaluate; a file dataset's rows once each, at most ``size``, in the order ``seed`` shuffles."""

    NULL_MEANS_DEFAULT: ClassVar[tuple[str, ...]] = ("size", "seed", "params")

    dataset: str = option(
        help="a reasoning-gym dataset (a key of reasoning_gym.factory.DATASETS), or any name with a source",
        parse=text,
    )
    size: int = option(100, "how many items", low=1, high=MAX_SIZE)
    seed: int = option(42, "base seed of the evaluation seed space, disjoint from training's and validation's",
                       low=0, high=MAX_SEED)  # fmt: skip
    params: dict = option(
        {}, "the dataset's reasoning-gym config (not size or seed); a file dataset's filters (MATH: levels, types)"
    )
    source: dict | None = option(None, "a file dataset's {format, eval: <file>, train: <file>}, as in a mix (see Math)")
    items: str | None = option(None, "this entry's items (see the config's items)", choices=ITEMS,
                               noun="kind of items", doc_default="items")  # fmt: skip

    def mix_spec(self) -> dict:
        """This entry as a one-dataset mix entry of ``reasoning_gym.datasets``."""
        spec = {"weight": 1, "config": self.params}
        return {**spec, "source": self.source} if self.source is not None else spec

    def validate(self, where: str) -> None:
        for reserved in ("size", "seed"):
            if reserved in self.params:
                raise ConfigError(f"{where}.params.{reserved}: set {reserved} next to params, not inside it")
        spec = self.spec(where)  # the data room's own checks, on this file's field names
        if spec.source is None:
            check_generator_config(f"{where}.dataset", self.dataset, self.params, config_at=f"{where}.params")
            return
        check_filter(f"{where}.params", spec.source.format, self.params)
        check_file_dataset_name(f"{where}.dataset", self.dataset)
        spec.source.required_file(where, self.dataset, "eval")  # the run reads it (runner.check_files)

    def spec(self, where: str = "source") -> DatasetSpec:
        """This entry as the data room's dataset of a mix; ``where`` names the entry in a bad source's error."""
        source = None if self.source is None else parse_source(f"{where}.source", self.source)
        return DatasetSpec(config=self.params, source=source)


def _datasets(where: str, value: Any) -> list[DatasetEntry]:
    if not isinstance(value, list) or not value:
        raise ConfigError(f"{where}: needs a list of {{dataset, size, seed, params}}; add at least one")
    shape = "{dataset, size, seed, params}"
    return [parse_entry(DatasetEntry, data, f"{where}[{j}]", shape) for j, data in enumerate(value)]


@dataclass
class CategoryEntry:
    """A named group of datasets."""

    category: str = option(help="a label for reports (it need not be reasoning-gym's category)", parse=text)
    datasets: list[DatasetEntry] = option(help="the datasets to evaluate under this label", parse=_datasets)


def _categories(where: str, value: Any) -> list[CategoryEntry]:
    if not isinstance(value, list) or not value:
        raise ConfigError(f"{where}: needs a list of {{category, datasets}}; add at least one")
    shape = "{category, datasets}"
    categories = [parse_entry(CategoryEntry, data, f"{where}[{i}]", shape) for i, data in enumerate(value)]
    seen = set()
    for i, category in enumerate(categories):
        for j, entry in enumerate(category.datasets):
            if (category.category, entry.dataset) in seen:
                raise ConfigError(
                    f"{where}[{i}].datasets[{j}]: {entry.dataset!r} appears twice in category {category.category!r}; "
                    "results are keyed by (category, dataset), so put the second one in another category"
                )
            seen.add((category.category, entry.dataset))
    return categories


def default_backend() -> str:
    """``vllm`` when it is importable, else ``hf``."""
    return "vllm" if importlib.util.find_spec("vllm") is not None else "hf"


@dataclass
class EvalConfig:
    """An evaluation run: the model, the datasets, sampling, scoring, the backend and where results go."""

    NULL_MEANS_DEFAULT: ClassVar[tuple[str, ...]] = (
        "dtype", "developer_role", "math_datasets", "engine_kwargs", "decoding"
    )  # fmt: skip

    model_path: str = option(
        help="local model folder or hub id; for openai, the served model name unless served_model_name is set",
        parse=text, doc_default="required",
    )  # fmt: skip
    categories: list[CategoryEntry] = option(
        help="[{category, datasets: [{dataset, size, seed, params}]}]", parse=_categories, doc_default="required"
    )
    items: str = option(
        "split",
        "split: the evaluation split (questions held out by hash); reference: create_dataset(name, seed=seed, "
        "size=size, **params) items in order, as reasoning-gym's evaluator draws them; file datasets ignore it",
        choices=ITEMS, noun="kind of items",
    )  # fmt: skip
    reference_training: ReferenceTraining | None = option(
        None,
        "{datasets: {dataset: {weight, config}}, size: 20000, seed: 1}, reasoning-gym's training composite of an "
        "experiment: count per dataset the items that are its questions (in_reference_training); none: not counted",
        parse=lambda where, value: None if value is None else parse_section(ReferenceTraining, value, where),
    )
    max_tokens: int = option(2048, "response budget in tokens (of each try, in retry episodes)", low=1, high=10**7)
    retry: RetryConfig | None = option(
        None,
        "{max_turns, feedback, discount}: run \"wrong, try again\" episodes as training's retry: section does "
        "(see Multi-turn episodes); none: one answer per completion",
        parse=lambda where, value: None if value is None else parse_section(RetryConfig, value, where),
    )
    temperature: float = option(0.6, "sampling temperature, in [0, 2] (vLLM's own limits); 0 is greedy", low=0.0,
                                high=2.0)  # fmt: skip
    top_p: float = option(0.9, "nucleus sampling mass, in (0, 1]", parse=partial(above_zero, high=1.0))
    dtype: str = option("auto", "weights dtype of the local backends", choices=DTYPES, noun="dtype")
    developer_prompt: str | None = option(
        None, "a key of reasoning-gym's SYSTEM_PROMPTS or literal text; none: no system message", parse=maybe_text
    )
    developer_role: str = option("system", "the role of the developer prompt's message", choices=ROLES, noun="role")
    eval_repeats: int = option(1, "completions sampled per item (the n of pass@k)", low=1, high=10**4)
    output_dir: str = option("results", "runs go to output_dir/<run name>/", parse=text)
    save_metadata: bool = option(True, "write the run's metadata into results.json")
    save_full_results: bool = option(True, "write every item's completions into results.json")
    backend: str | None = option(
        None, "vllm, hf or openai", choices=tuple(BACKENDS), noun="backend", doc_default="vllm if importable, else hf"
    )
    base_url: str | None = option(
        None, "the OpenAI-compatible server (openai), e.g. http://localhost:8000/v1", parse=maybe_text
    )
    api_key_env: str | None = option(
        None, "environment variable holding the API key; none: OPENAI_API_KEY if set, else no key", parse=maybe_text
    )
    served_model_name: str | None = option(None, "the model field of openai requests", parse=maybe_text,
                                           doc_default="model_path")  # fmt: skip
    k_values: list[int] | None = option(
        None, "the k of pass@k, mean@k and maj@k, each in [1, eval_repeats]", doc_default="1, 2, 4, …, eval_repeats"
    )
    scoring_mode: str = option("lenient", "the extraction behind score and accuracy", choices=MODES, noun="mode")
    chat_template_kwargs: dict = option(
        {}, "chat-template arguments (e.g. enable_thinking: false) of hf's and vllm's prompts, sent to openai servers "
        "as chat_template_kwargs (vLLM's server reads them); as training's data.apply_chat_template_kwargs"
    )
    response_prefix: str = option(
        "auto", "text the chat template opens the assistant turn with (a thinking model's <think>), judged before "
        "the response by the format rules; auto: read off model_path's tokenizer (an openai model only from a "
        "local folder)",
    )
    math_datasets: list[str] = option([], "datasets scored by math-verify's equivalence", parse=dataset_names)
    decoding: DecodingConfig = option(
        DecodingConfig, "how completions are chosen: sample, or OREO's value_beam or value_rerank (see Decoding)"
    )
    batch_size: int = option(8, "prompts per generate call of the hf backend, per search of the value modes", low=1,
                             high=10**6)
    concurrency: int = option(8, "openai requests in flight at once", low=1, high=10**4)
    max_retries: int = option(4, "retries of a failed openai request (connection errors, 429, 5xx)", low=0, high=100)
    retry_backoff: float = option(1.0, "seconds before the first retry, doubled for each next", low=0.0, high=3600.0)
    request_timeout: float = option(600.0, "seconds one openai request may take", parse=partial(above_zero, high=1e6))
    save_every: int = option(0, "prompts between two saves of results; 0: the backend's default", low=0, high=10**9)
    device: str = option("auto", "hf, and the value modes' value model: auto (cuda if available, else cpu), cpu, "
                         "cuda, cuda:1, ...", parse=text)  # fmt: skip
    engine_kwargs: dict = option(
        {}, "extra keyword arguments of vllm.LLM (on a CPU: over vLLM's CPU settings, docs/cpu.md) or "
        "from_pretrained (hf)"
    )
    run_name: str | None = option(None, "the run folder's name", parse=run_name, doc_default="<config>_<timestamp>")
    name: str = option("eval", "the config file's stem (set by load_config, not a YAML key)")

    @property
    def system_prompt(self) -> str | None:
        """The developer prompt's text (a ``SYSTEM_PROMPTS`` key resolved), or None."""
        return system_prompt(self.developer_prompt)

    def validate(self, where: str) -> None:
        """Cross-field checks; fills ``backend`` and ``k_values`` where the file leaves them out."""
        prompt = self.developer_prompt
        if prompt is not None and _WORD.match(prompt) and prompt not in SYSTEM_PROMPTS:
            close = difflib.get_close_matches(prompt, list(SYSTEM_PROMPTS), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(
                f"developer_prompt: {prompt!r} is not a key of reasoning-gym's SYSTEM_PROMPTS{hint}; valid keys: "
                f"{', '.join(SYSTEM_PROMPTS)} (literal prompt text must be more than one word)"
            )
        self.backend = self.backend or default_backend()
        self.k_values = self._checked_k_values()
        self.decoding.check_for(self.backend, self.eval_repeats)
        if self.retry is not None and self.decoding.mode != "sample":
            raise ConfigError(
                f"retry: episodes sample every try; decoding.mode {self.decoding.mode!r} picks completions by value "
                "instead. Remove retry, or set decoding.mode: sample"
            )
        if self.backend == "openai":
            example = "set e.g. http://localhost:8000/v1"
            if not self.base_url:
                raise ConfigError(f"base_url: the openai backend needs the server's URL; {example}")
            if not _URL.match(self.base_url):
                raise ConfigError(f"base_url: {self.base_url!r} is not an http(s) URL; {example}")

    def _checked_k_values(self) -> list[int]:
        repeats = self.eval_repeats
        if self.k_values is None:
            return default_k_values(repeats)
        if not self.k_values:
            raise ConfigError(f"k_values: {self.k_values!r} is not a list of integers; set e.g. [1, {repeats}]")
        for i, k in enumerate(self.k_values):
            if not 1 <= k <= repeats:
                raise ConfigError(f"k_values[{i}]: {k!r} is not an integer in [1, {repeats}]; set one")
        return sorted(set(self.k_values))


def parse_config(data: Any, name: str = "eval") -> EvalConfig:
    """Builds and validates an :class:`EvalConfig` from a plain dict (a parsed YAML file); ConfigError if bad."""
    config = parse_entry(EvalConfig, data, "", "a mapping of fields", skip=("name",))
    config.name = name
    return config


def config_name(path: Path) -> str:
    """The file's stem, after its folder's name unless ``configs`` (``inter_generalisation-algorithmic``)."""
    folder = path.resolve().parent.name
    return path.stem if folder in ("configs", "") else f"{folder}-{path.stem}"


def load_config(path: str | os.PathLike, dotlist: Sequence[str] = (), **overrides: Any) -> EvalConfig:
    """Reads, resolves and validates the YAML file at ``path``; a :class:`ConfigError` starts with the path.

    Args:
        dotlist: ``key=value`` overrides of its fields (``decoding.beam_width=3``), merged first.
        **overrides: top-level fields to replace (``None`` ignored); ``category`` keeps the categories with that
            label, ``decoding`` is a dict of ``decoding`` fields to replace.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such config file; pass --config with an existing YAML file")
    data = yaml_config(path, dotlist)
    category = overrides.pop("category", None)
    decoding = overrides.pop("decoding", None)  # fields of the decoding section (--decoding, --value-model)
    if isinstance(data, dict) and decoding:
        data["decoding"] = {**(data.get("decoding") or {}), **decoding}
    if isinstance(data, dict):
        data.update({key: value for key, value in overrides.items() if value is not None})
        if overrides.get("items") is not None:  # --items replaces every entry's items, not only the default
            groups = [group for group in data.get("categories") or [] if isinstance(group, dict)]
            for entry in [e for group in groups for e in group.get("datasets") or [] if isinstance(e, dict)]:
                entry.pop("items", None)
    try:
        config = parse_config(data, name=config_name(path))
    except ConfigError as error:
        raise ConfigError(f"{path}: {error}") from None
    if category is not None:
        labels = [c.category for c in config.categories]
        if category not in labels:
            raise ConfigError(
                f"{path}: --category {category!r} is not in the config; its categories: {', '.join(labels)}"
            )
        config.categories = [c for c in config.categories if c.category == category]
    return config


def check_runtime(config: EvalConfig) -> None:
    """Checks what the backend needs from this machine (package, model, API key), before any model loads."""
    if config.backend == "vllm" and importlib.util.find_spec("vllm") is None:
        raise ConfigError("backend: 'vllm' is not installed here; install vllm (GPU machines) or set backend: hf")
    if config.backend in ("vllm", "hf"):
        check_model_path("model_path", config.model_path)
    if config.decoding.mode != "sample":
        check_value_model(config.decoding.value_model, config.model_path)
    if config.backend == "openai" and config.api_key_env and not os.environ.get(config.api_key_env):
        raise ConfigError(
            f"api_key_env: environment variable {config.api_key_env!r} is not set; export it with the API key"
        )
