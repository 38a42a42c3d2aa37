"""One evaluation run: items → backend → the reward's scorer → items.jsonl → reports.

Every check runs before a model loads (config, data files, machine, context lengths, run folder); each finished
item is appended to ``items.jsonl`` before the next backend call, so ``--resume`` continues where a run stopped.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import json
import logging
import math
import os
import re
import time
from datetime import datetime
from pathlib import Path

from tqdm.auto import tqdm

from rg_verl import reward
from rg_verl.common.atomic import write_atomic
from rg_verl.common.chat_template import AUTO
from rg_verl.common.schema import ConfigError
from rg_verl.data.files import open_split
from rg_verl.data.reference_questions import training_questions
from rg_verl.evaluation.backends import Backend, Completion, Sampling, create_backend
from rg_verl.evaluation.config import EvalConfig, check_runtime
from rg_verl.evaluation.context import check_context
from rg_verl.evaluation.episodes import Episode, run_episodes
from rg_verl.evaluation.items import EvalDataset, eval_datasets, prompt_messages
from rg_verl.evaluation.report import build_results, write_reports
from rg_verl.evaluation.store import ItemStore
from rg_verl.retry.episode import episode_record
from rg_verl.reward.episode import EPISODE_KEY

__all__ = ["check_files", "evaluate", "reference_training", "score_item", "resolve_run_dir"]

logger = logging.getLogger(__name__)

RUN_FILE = "run.json"
ITEMS_FILE = "items.jsonl"
# fields that must not change between a run and its --resume: they change what an item's record means
FINGERPRINT_FIELDS = (
    "model_path", "max_tokens", "temperature", "top_p", "eval_repeats", "developer_prompt", "developer_role",
    "scoring_mode", "math_datasets", "decoding", "chat_template_kwargs", "response_prefix", "retry",
)  # fmt: skip


def check_files(config: EvalConfig) -> None:
    """Reads and checks the eval file of every file dataset; a :class:`ConfigError` names the entry's field."""
    for i, category in enumerate(config.categories):
        for j, entry in enumerate(category.datasets):
            if entry.source is not None:
                where = f"categories[{i}].datasets[{j}]"
                open_split(where, entry.dataset, entry.spec(where), "eval")


def prefix_tokenizer(config: EvalConfig) -> str | None:
    """The tokenizer whose template ``response_prefix: auto`` reads: the model's; for openai a local folder only."""
    if config.backend == "openai" and not os.path.isdir(os.path.expanduser(config.model_path)):
        return None
    return config.model_path


def warn_unread_prefix(config: EvalConfig) -> None:
    """``response_prefix: auto`` with a served model: its template cannot be read, so no prefix is assumed."""
    if config.response_prefix == AUTO and prefix_tokenizer(config) is None:
        logger.warning(
            "response_prefix: auto cannot read the chat template of the served model %r (model_path is not a local "
            "folder), so responses are judged as written. For a thinking model whose template opens the answer "
            "with <think>, set response_prefix to that text (e.g. '<think>\\n'), or model_path to its local folder.",
            config.model_path,
        )


def score_text(item: dict, text: str, config: EvalConfig, extra_info: dict | None = None) -> dict:
    """``rg_verl.reward.compute_score`` of one response to ``item`` under the evaluation's settings."""
    return reward.compute_score(
        item["data_source"], text, item["reward_model"]["ground_truth"],
        item["extra_info"] if extra_info is None else extra_info, mode=config.scoring_mode,
        math_datasets=config.math_datasets, response_prefix=config.response_prefix,
        tokenizer_path=prefix_tokenizer(config), chat_template_kwargs=config.chat_template_kwargs,
    )  # fmt: skip


def _accuracy(items: list[dict], config: EvalConfig, index: int, text: str) -> float:
    return score_text(items[index], text, config)["accuracy"]


def score_item(dataset: EvalDataset, index: int, item: dict, completions: list[Completion] | list[Episode],
               config: EvalConfig) -> dict:  # fmt: skip
    """The items.jsonl record of one item, every completion scored (an episode by its last try, as in training)."""
    scored = []
    for completion in completions:
        extra, record = None, {}
        if isinstance(completion, Episode):
            extra = {**item["extra_info"], EPISODE_KEY: episode_record(completion.accuracies, completion.final.text,
                                                                       config.retry)}  # fmt: skip
            record = {"tries": [c.text for c in completion.tries], "num_tokens": completion.num_tokens}
            completion = completion.final
        parts = score_text(item, completion.text, config, extra)
        scored.append(
            {
                # the reward's answer under the scoring mode, read after a thinking template's opening <think>
                "model_answer": parts["pred"] or None,
                "full_model_response": completion.text,
                "score": parts["score"],
                "num_tokens": completion.num_tokens,
                **{key: value for key, value in parts.items() if key not in ("score", "pred")},
                **record,
            }
        )
    scores = [c["score"] for c in scored]
    return {
        "key": dataset.item_key(index),
        "category": dataset.category,
        "dataset": dataset.entry.dataset,
        "index": index,
        "question": item["extra_info"]["entry"]["question"],
        "expected_answer": item["reward_model"]["ground_truth"],
        "best_score": max(scores),
        "mean_score": math.fsum(scores) / len(scores),
        "completions": scored,
    }


def _plain(value):
    """A setting as run.json stores it (a section as its dict of fields)."""
    return dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value


def _fingerprint(config: EvalConfig, datasets: list[EvalDataset]) -> dict:
    return {
        "settings": {name: _plain(getattr(config, name)) for name in FINGERPRINT_FIELDS},
        "datasets": {ds.key: {"seed": ds.entry.seed, "params": ds.entry.params} for ds in datasets},
    }


def _check_fingerprint(run_dir: Path, stored: dict, current: dict) -> None:
    for name, value in current["settings"].items():
        if name in stored.get("settings", {}) and stored["settings"][name] != value:
            raise ConfigError(
                f"{name}: {value!r} differs from {stored['settings'][name]!r} in the run being resumed ({run_dir}); "
                "set it back, or start a new run without --resume"
            )
    for key, value in current["datasets"].items():
        if key in stored.get("datasets", {}) and stored["datasets"][key] != json.loads(json.dumps(value)):
            raise ConfigError(
                f"categories: {key} has seed/params {value} but {stored['datasets'][key]} in the run being resumed "
                f"({run_dir}); its items would differ: set them back, or start a new run without --resume"
            )


def resolve_run_dir(config: EvalConfig, resume: bool) -> Path:
    """``run_name`` if set; with ``resume``, the latest ``<config name>_*`` run; else a new one.

    A :class:`ConfigError` without ``resume`` if the folder already holds results.
    """
    output_dir = Path(config.output_dir)
    if config.run_name:
        run_dir = output_dir / config.run_name
    else:
        own = re.compile(rf"^{re.escape(config.name)}_\d{{8}}_\d{{6}}(_\d+)?$")
        earlier = [p.parent for p in output_dir.glob(f"*/{RUN_FILE}") if own.match(p.parent.name)] if resume else []
        earlier.sort(key=lambda p: (p.name[len(config.name) + 1 : len(config.name) + 16], len(p.name), p.name))
        if earlier:
            run_dir = earlier[-1]
        else:
            if resume:
                logger.info("no earlier %s run under %s to resume; starting a new one", config.name, output_dir)
            stamp = datetime.now().strftime("%Y%m%d_%H%M%S")
            run_dir = output_dir / f"{config.name}_{stamp}"
            suffix = 1
            while run_dir.exists():
                suffix += 1
                run_dir = output_dir / f"{config.name}_{stamp}_{suffix}"
    if not resume and (run_dir / ITEMS_FILE).exists():
        raise ConfigError(
            f"run_name: {run_dir} already holds results; pass --resume to continue that run, "
            "or choose another --run-name"
        )
    return run_dir


def _versions() -> dict[str, str]:
    versions = {}
    for package in ("rg-verl", "reasoning-gym", "transformers", "vllm"):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            pass
    return versions


def _start_run(config: EvalConfig, datasets: list[EvalDataset], resume: bool) -> tuple[Path, str]:
    """The run folder and its creation time, run.json written; on ``resume``, checked against ``FINGERPRINT_FIELDS``."""
    run_dir = resolve_run_dir(config, resume)
    fingerprint = _fingerprint(config, datasets)
    run_file = run_dir / RUN_FILE
    created = datetime.now().isoformat()
    if resume and run_file.exists():
        stored = json.loads(run_file.read_text())
        _check_fingerprint(run_dir, stored.get("fingerprint", {}), fingerprint)
        # datasets of the earlier run that this config leaves out (another --category) stay recorded
        fingerprint["datasets"] = {**stored.get("fingerprint", {}).get("datasets", {}), **fingerprint["datasets"]}
        created = stored.get("created", created)
    write_atomic(run_file, json.dumps({"created": created, "fingerprint": fingerprint}, indent=2, default=str))
    return run_dir, created


def _generate(config: EvalConfig, backend: Backend, pending: list[tuple[EvalDataset, int]], store: ItemStore) -> None:
    """Generates and scores the ``pending`` items, appending each chunk of ``save_every`` prompts to ``store``."""
    save_every = config.save_every or backend.default_save_every(config) or len(pending)
    sampling = Sampling(max_tokens=config.max_tokens, temperature=config.temperature, top_p=config.top_p)
    with tqdm(total=len(pending), desc=f"evaluating {config.name}", unit="item") as bar:
        for start in range(0, len(pending), save_every):
            chunk = pending[start : start + save_every]
            items = [dataset[i] for dataset, i in chunk]
            prompts = [prompt_messages(item, config) for item in items]
            if config.retry is None:
                outputs = backend.generate(prompts, config.eval_repeats, sampling)
            else:
                judge = functools.partial(_accuracy, items, config)
                outputs = run_episodes(backend, prompts, config.eval_repeats, sampling, config.retry, judge)
            if len(outputs) != len(items) or any(len(o) != config.eval_repeats for o in outputs):
                raise RuntimeError(f"backend {config.backend} returned the wrong number of completions")
            store.append(
                score_item(dataset, i, item, completions, config)
                for (dataset, i), item, completions in zip(chunk, items, outputs, strict=True)
            )
            bar.update(len(chunk))


def reference_training(config: EvalConfig, datasets: list[EvalDataset]) -> dict[str, set[str]] | None:
    """The question hashes of ``reference_training``'s composite per evaluated generator, or None without one."""
    if config.reference_training is None:
        return None
    names = {ds.entry.dataset for ds in datasets if ds.entry.source is None}
    started = time.time()
    questions = training_questions(config.reference_training, names)
    logger.info("reference training composite: %d questions of %d evaluated datasets in %.1f s",
                sum(map(len, questions.values())), len(names), time.time() - started)  # fmt: skip
    return questions


def _metadata(config: EvalConfig, created: str, duration_s: float) -> dict:
    """results.json's ``metadata``: what was evaluated, how, and with which package versions."""
    head = {"timestamp": created, "model": config.model_path, "backend": config.backend, "duration_seconds": duration_s}
    fields = ("max_tokens", "temperature", "top_p", "eval_repeats", "k_values", "scoring_mode", "decoding",
              "developer_prompt", "developer_role", "dtype")  # fmt: skip
    return {**head, **{name: _plain(getattr(config, name)) for name in fields}, "config": config.name,
            "split": "eval", "items": config.items, "versions": _versions()}  # fmt: skip


def evaluate(config: EvalConfig, *, resume: bool = False, backend: Backend | None = None) -> Path:
    """Runs (or, with ``resume``, finishes) the evaluation; returns the run folder (items.jsonl, results.json, ...).

    ``backend``: a ready backend instead of building ``config.backend`` (tests, notebooks); the machine and context
    checks are then skipped. Every :class:`ConfigError` is raised before any model loads.
    """
    started = time.time()
    check_files(config)
    if backend is None:
        check_runtime(config)
    warn_unread_prefix(config)
    datasets = eval_datasets(config)
    if backend is None:
        check_context(config, datasets)
    training = reference_training(config, datasets)
    run_dir, created = _start_run(config, datasets, resume)
    store = ItemStore(run_dir / ITEMS_FILE)
    done = store.load()
    pending = [(ds, i) for ds in datasets for i in range(len(ds)) if ds.item_key(i) not in done]
    if done:
        total = sum(len(ds) for ds in datasets)
        logger.info("resuming %s: %d of %d items already finished", run_dir, total - len(pending), total)
    if pending:
        engine = create_backend(config) if backend is None else backend
        try:
            _generate(config, engine, pending, store)
        finally:
            if backend is None:  # only a backend built here is closed here
                engine.close()
    metadata = _metadata(config, created, time.time() - started)
    results = build_results(config, datasets, store.load(), metadata, reference_training=training)
    write_reports(run_dir, results, config)
    logger.info("results in %s", run_dir)
    return run_dir
