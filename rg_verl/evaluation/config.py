"""The evaluation config: one YAML file, checked field by field before any model loads.

The schema is a superset of reasoning-gym's ``training/evaluations`` YAMLs, so those files load as
they are (``dtype`` and every field they lack has a default). A minimal file::

    model_path: Qwen/Qwen2.5-3B-Instruct
    categories:
      - category: arithmetic
        datasets:
          - dataset: chain_sum
            size: 100
            seed: 42
            params: {min_terms: 2}

Values may use OmegaConf interpolation, e.g. ``${oc.env:MY_MODEL,/default/path}``. Every error is a
:class:`rg_verl.config.ConfigError` naming the file, the field, the bad value and the fix.
"""

from __future__ import annotations

import difflib
import importlib.util
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException
from reasoning_gym.factory import DATASETS
from reasoning_gym.utils import SYSTEM_PROMPTS

from rg_verl.config import MODES, ConfigError, ReasoningGymConfig, check_keys, check_model_path, dataset_name_error
from rg_verl.evaluation.metrics import default_k_values

__all__ = ["DatasetEntry", "CategoryEntry", "EvalConfig", "load_config", "parse_config", "check_runtime"]

DTYPES = ("auto", "float32", "bfloat16", "float16")
ROLES = ("system", "developer", "user")
BACKEND_NAMES = ("vllm", "hf", "openai")  # the keys of rg_verl.evaluation.backends.BACKENDS
_WORD = re.compile(r"^\w+$")
# item seeds: rg_verl.data.dataset derives the eval split's seeds from a base seed below 10**9
MAX_SEED = 10**9 - 1
MAX_SIZE = 10**7


@dataclass
class DatasetEntry:
    """One dataset to evaluate.

    Args:
        dataset: a reasoning-gym dataset name (a key of ``reasoning_gym.factory.DATASETS``), or any
            name for a dataset read from a file (with ``source``).
        size: how many items.
        seed: base seed; items come from the evaluation seed space that ``rg_verl.data.dataset`` derives
            from it, disjoint from the training and validation items of the same seed.
        params: keyword arguments of the dataset's reasoning-gym config class (not ``size``/``seed``);
            for a file dataset, its filters (MATH: ``min_level``, ``max_level``, ``types``).
        source: for GSM8K or MATH read from a file, ``{format, eval}`` as in a training config's
            ``source`` (``rg_verl.data.files``); its rows are evaluated once each, in the order ``seed``
            shuffles them to, at most ``size`` of them.
    """

    dataset: str
    size: int = 100
    seed: int = 42
    params: dict = field(default_factory=dict)
    source: dict | None = None

    def mix_spec(self) -> dict:
        """This entry as a one-dataset mix entry of ``reasoning_gym.datasets``."""
        spec = {"weight": 1, "config": self.params}
        return {**spec, "source": self.source} if self.source is not None else spec


@dataclass
class CategoryEntry:
    """A named group of datasets; the name is a label for reports (it need not be reasoning-gym's).

    Args:
        category: the label.
        datasets: the :class:`DatasetEntry` list.
    """

    category: str
    datasets: list[DatasetEntry]


@dataclass
class EvalConfig:
    """An evaluation run.

    Args:
        model_path: local Hugging Face model folder or hub id; for ``openai``, the served model name
            unless ``served_model_name`` is set.
        categories: the :class:`CategoryEntry` list.
        max_tokens: response budget in tokens.
        temperature: sampling temperature; 0 is greedy.
        top_p: nucleus sampling mass, in (0, 1].
        dtype: weights dtype for local backends: auto, float32, bfloat16 or float16.
        developer_prompt: a key of reasoning-gym's ``SYSTEM_PROMPTS`` (e.g. ``default``, ``DeepSeekZero``)
            or literal text; none: no system message.
        developer_role: the role of that message: system, developer or user.
        eval_repeats: completions sampled per item (the ``n`` of pass@k).
        output_dir: runs go to ``output_dir/<run name>/``.
        save_metadata: write the run's metadata into results.json.
        save_full_results: write every item's completions into results.json (items.jsonl always has them).
        backend: vllm, hf or openai; default vllm when it is importable, else hf.
        base_url: the OpenAI-compatible server, e.g. ``http://localhost:8000/v1`` (``openai`` only).
        api_key_env: name of the environment variable holding the API key (``openai``); default: use
            ``OPENAI_API_KEY`` if it is set, else send no key.
        served_model_name: the ``model`` field of requests (``openai``); default ``model_path``.
        k_values: the k of pass@k, mean@k and maj@k, each in [1, eval_repeats]; default 1, 2, 4, ...
            and eval_repeats.
        scoring_mode: the extraction that gives ``score`` and ``accuracy``: lenient (the last
            ``<answer>`` block) or strict (exactly ``<think>…</think><answer>…</answer>``); both
            accuracies are always reported.
        math_datasets: datasets scored by math-verify's equivalence (as in the reward).
        batch_size: prompts per ``generate`` call of the ``hf`` backend (each with eval_repeats rows).
        concurrency: requests in flight at once (``openai``).
        max_retries: retries of a failed request (``openai``; connection errors, 429 and 5xx).
        retry_backoff: seconds before the first retry; doubled for each next one (``openai``).
        request_timeout: seconds one request may take (``openai``).
        save_every: prompts generated between two saves of results; 0 is the backend's default
            (vllm: everything in one call; hf: batch_size; openai: 4 x concurrency).
        device: ``hf`` only: auto (cuda when available, else cpu), cpu, cuda, cuda:1, ...
        engine_kwargs: extra keyword arguments for ``vllm.LLM`` or ``from_pretrained`` (hf).
        run_name: the run folder's name; default ``<config file stem>_<timestamp>``.
        name: the config file's stem (set by :func:`load_config`).
    """

    model_path: str
    categories: list[CategoryEntry]
    max_tokens: int = 2048
    temperature: float = 0.6
    top_p: float = 0.9
    dtype: str = "auto"
    developer_prompt: str | None = None
    developer_role: str = "system"
    eval_repeats: int = 1
    output_dir: str = "results"
    save_metadata: bool = True
    save_full_results: bool = True
    backend: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None
    served_model_name: str | None = None
    k_values: list[int] | None = None
    scoring_mode: str = "lenient"
    math_datasets: list[str] = field(default_factory=list)
    batch_size: int = 8
    concurrency: int = 8
    max_retries: int = 4
    retry_backoff: float = 1.0
    request_timeout: float = 600.0
    save_every: int = 0
    device: str = "auto"
    engine_kwargs: dict = field(default_factory=dict)
    run_name: str | None = None
    name: str = "eval"

    @property
    def system_prompt(self) -> str | None:
        """The developer prompt's text (a ``SYSTEM_PROMPTS`` key resolved), or None."""
        if not self.developer_prompt:
            return None
        return SYSTEM_PROMPTS.get(self.developer_prompt, self.developer_prompt)


def _fail(where: str, message: str) -> ConfigError:
    return ConfigError(f"{where}: {message}")


def _int(where: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _fail(where, f"{value!r} is not an integer in [{low}, {high}]; set one")
    return value


def _float(where: str, value: Any, low: float, high: float, low_open: bool = False) -> float:
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
    if not ok or not (low < value if low_open else low <= value) or value > high:
        interval = f"{'(' if low_open else '['}{low}, {high}]"
        raise _fail(where, f"{value!r} is not a number in {interval}; set one")
    return float(value)


def _str(where: str, value: Any, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value:
        raise _fail(where, f"{value!r} is not a non-empty string; set one")
    return value


def _bool(where: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise _fail(where, f"{value!r} is not true or false; set one")
    return value


def _choice(where: str, value: Any, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise _fail(where, f"{value!r} is not valid; set one of {', '.join(choices)}")
    return value


def _dataset(where: str, data: Any) -> DatasetEntry:
    if not isinstance(data, dict):
        raise _fail(where, f"expected {{dataset, size, seed, params}}, got {data!r}")
    check_keys(where, data, DatasetEntry)
    name = data.get("dataset")
    source = data.get("source")
    if not isinstance(name, str) or (name not in DATASETS and source is None):
        if not isinstance(name, str):
            raise _fail(f"{where}.dataset", f"{name!r} is not a dataset name; set a reasoning-gym dataset")
        raise dataset_name_error(f"{where}.dataset", name)
    size = data.get("size")
    seed = data.get("seed")
    entry = DatasetEntry(
        dataset=name,
        size=DatasetEntry.size if size is None else _int(f"{where}.size", size, 1, MAX_SIZE),
        seed=DatasetEntry.seed if seed is None else _int(f"{where}.seed", seed, 0, MAX_SEED),
        params=data.get("params") or {},
        source=source,
    )
    if not isinstance(entry.params, dict):
        raise _fail(f"{where}.params", f"{entry.params!r} is not a mapping; set {{field: value}} or leave it out")
    for reserved in ("size", "seed"):
        if reserved in entry.params:
            raise _fail(f"{where}.params.{reserved}", f"set {reserved} next to params, not inside it")
    # reasoning-gym checks the params (its config class's validate()), as rg_verl.data.dataset will
    section = {"datasets": {name: entry.mix_spec()}, "seed": entry.seed, "eval_size": entry.size}
    try:
        ReasoningGymConfig.from_section(section, where=where, splits=("eval",))
    except ConfigError as error:  # name the fields as this file spells them
        prefix = f"{where}.datasets.{name}"
        message = str(error).replace(f"{prefix}.config", f"{where}.params").replace(prefix, where)
        raise ConfigError(message) from None
    return entry


def _categories(value: Any) -> list[CategoryEntry]:
    if not isinstance(value, list) or not value:
        raise _fail("categories", "needs a list of {category, datasets}; add at least one")
    categories, seen = [], set()
    for i, data in enumerate(value):
        where = f"categories[{i}]"
        if not isinstance(data, dict):
            raise _fail(where, f"expected {{category, datasets}}, got {data!r}")
        check_keys(where, data, CategoryEntry)
        label = _str(f"{where}.category", data.get("category"))
        datasets = data.get("datasets")
        if not isinstance(datasets, list) or not datasets:
            raise _fail(f"{where}.datasets", "needs a list of {dataset, size, seed, params}; add at least one")
        entries = [_dataset(f"{where}.datasets[{j}]", d) for j, d in enumerate(datasets)]
        for j, entry in enumerate(entries):
            if (label, entry.dataset) in seen:
                raise _fail(
                    f"{where}.datasets[{j}]",
                    f"{entry.dataset!r} appears twice in category {label!r}; results are keyed by "
                    "(category, dataset), so put the second one in another category",
                )
            seen.add((label, entry.dataset))
        categories.append(CategoryEntry(category=label, datasets=entries))
    return categories


def default_backend() -> str:
    """``vllm`` when it is importable, else ``hf``."""
    return "vllm" if importlib.util.find_spec("vllm") is not None else "hf"


def parse_config(data: Any, name: str = "eval") -> EvalConfig:
    """Builds and validates an :class:`EvalConfig` from a plain dict (a parsed YAML file).

    Raises:
        ConfigError: On the first bad field.
    """
    if not isinstance(data, dict):
        raise _fail("config", f"expected a mapping of fields, got {type(data).__name__}")
    check_keys("", data, EvalConfig, skip=("name",))
    d = EvalConfig  # defaults
    get = data.get
    repeats = _int("eval_repeats", get("eval_repeats", d.eval_repeats), 1, 10**4)
    prompt = _str("developer_prompt", get("developer_prompt"), optional=True)
    if prompt is not None and _WORD.match(prompt) and prompt not in SYSTEM_PROMPTS:
        close = difflib.get_close_matches(prompt, list(SYSTEM_PROMPTS), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise _fail(
            "developer_prompt",
            f"{prompt!r} is not a key of reasoning-gym's SYSTEM_PROMPTS{hint}; valid keys: "
            f"{', '.join(SYSTEM_PROMPTS)} (literal prompt text must be more than one word)",
        )
    backend = get("backend") or default_backend()
    _choice("backend", backend, BACKEND_NAMES)
    k_values = get("k_values")
    if k_values is None:
        k_values = default_k_values(repeats)
    if not isinstance(k_values, list) or not k_values:
        raise _fail("k_values", f"{k_values!r} is not a list of integers; set e.g. [1, {repeats}]")
    k_values = sorted({_int(f"k_values[{i}]", k, 1, repeats) for i, k in enumerate(k_values)})
    math_datasets = get("math_datasets") or []
    if not isinstance(math_datasets, list):
        raise _fail("math_datasets", f"{math_datasets!r} is not a list of dataset names")
    for i, ds in enumerate(math_datasets):
        if ds not in DATASETS:
            raise dataset_name_error(f"math_datasets[{i}]", str(ds))
    engine_kwargs = get("engine_kwargs") or {}
    if not isinstance(engine_kwargs, dict):
        raise _fail("engine_kwargs", f"{engine_kwargs!r} is not a mapping")
    config = EvalConfig(
        model_path=_str("model_path", get("model_path")),
        categories=_categories(get("categories")),
        max_tokens=_int("max_tokens", get("max_tokens", d.max_tokens), 1, 10**7),
        temperature=_float("temperature", get("temperature", d.temperature), 0.0, 100.0),
        top_p=_float("top_p", get("top_p", d.top_p), 0.0, 1.0, low_open=True),
        dtype=_choice("dtype", get("dtype") or d.dtype, DTYPES),
        developer_prompt=prompt,
        developer_role=_choice("developer_role", get("developer_role") or d.developer_role, ROLES),
        eval_repeats=repeats,
        output_dir=_str("output_dir", get("output_dir", d.output_dir)),
        save_metadata=_bool("save_metadata", get("save_metadata", d.save_metadata)),
        save_full_results=_bool("save_full_results", get("save_full_results", d.save_full_results)),
        backend=backend,
        base_url=_str("base_url", get("base_url"), optional=True),
        api_key_env=_str("api_key_env", get("api_key_env"), optional=True),
        served_model_name=_str("served_model_name", get("served_model_name"), optional=True),
        k_values=k_values,
        scoring_mode=_choice("scoring_mode", get("scoring_mode", d.scoring_mode), MODES),
        math_datasets=list(math_datasets),
        batch_size=_int("batch_size", get("batch_size", d.batch_size), 1, 10**6),
        concurrency=_int("concurrency", get("concurrency", d.concurrency), 1, 10**4),
        max_retries=_int("max_retries", get("max_retries", d.max_retries), 0, 100),
        retry_backoff=_float("retry_backoff", get("retry_backoff", d.retry_backoff), 0.0, 3600.0),
        request_timeout=_float("request_timeout", get("request_timeout", d.request_timeout), 0.0, 10**6, True),
        save_every=_int("save_every", get("save_every", d.save_every), 0, 10**9),
        device=_str("device", get("device", d.device)),
        engine_kwargs=dict(engine_kwargs),
        run_name=_str("run_name", get("run_name"), optional=True),
        name=name,
    )
    if config.run_name is not None and ("/" in config.run_name or config.run_name in (".", "..")):
        raise _fail("run_name", f"{config.run_name!r} must be a plain folder name, without '/'")
    if config.backend == "openai":
        if not config.base_url:
            raise _fail("base_url", "the openai backend needs the server's URL; set e.g. http://localhost:8000/v1")
        if not re.match(r"^https?://", config.base_url):
            raise _fail("base_url", f"{config.base_url!r} is not an http(s) URL; set e.g. http://localhost:8000/v1")
    return config


def config_name(path: Path) -> str:
    """The name runs of this config are filed under: the file's stem, after its folder's name unless
    that is ``configs`` (``inter_generalisation/algorithmic.yaml`` -> ``inter_generalisation-algorithmic``).
    """
    folder = path.resolve().parent.name
    return path.stem if folder in ("configs", "") else f"{folder}-{path.stem}"


def load_config(path: str | os.PathLike, **overrides: Any) -> EvalConfig:
    """Reads, resolves (OmegaConf interpolation) and validates the YAML file at ``path``.

    Args:
        path: the YAML file.
        **overrides: top-level fields to replace before validation (``None`` values are ignored),
            plus ``category``: keep only the categories with this label.

    Raises:
        ConfigError: If the file is missing or unreadable, or a field is bad; the message starts
            with the file's path.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such config file; pass --config with an existing YAML file")
    try:
        data = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    except (OmegaConfBaseException, ValueError) as error:  # YAML syntax, a failed interpolation
        raise ConfigError(f"{path}: cannot read the config: {error}") from None
    category = overrides.pop("category", None)
    if isinstance(data, dict):
        data.update({key: value for key, value in overrides.items() if value is not None})
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
    """Checks what the backend needs from this machine, before any model loads.

    Raises:
        ConfigError: The backend's package is missing, the model folder does not exist, or the
            API key's environment variable is not set.
    """
    if config.backend == "vllm" and importlib.util.find_spec("vllm") is None:
        raise ConfigError("backend: 'vllm' is not installed here; install vllm (GPU machines) or set backend: hf")
    if config.backend in ("vllm", "hf"):
        check_model_path("model_path", config.model_path)
    if config.backend == "openai" and config.api_key_env and not os.environ.get(config.api_key_env):
        raise ConfigError(
            f"api_key_env: environment variable {config.api_key_env!r} is not set; export it with the API key"
        )
