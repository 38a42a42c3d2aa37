"""Build a tiny, randomly initialised Qwen2 causal LM with a locally trained tokenizer.

Saved with ``save_pretrained`` so ``AutoModelForCausalLM``/``AutoTokenizer`` load it offline;
meant for fast end-to-end tests of the training pipeline.

Optionally the model gets a short supervised *warm start* (:func:`run_warm_start`): next-token
training on chat-formatted reasoning-gym prompts followed by responses of which only a share
(``format_rate``) has the strict ``<think>…</think><answer>…</answer>`` format. A random model
almost never writes that format; a warm-started one writes it some of the time, so a format
reward is reachable by sampling but not saturated, and an RL run on it has something to learn.
A warm-started model records its options in ``warm_start.json``, and :func:`ensure_tiny_model`
refuses to reuse a model built with other options.
"""

from __future__ import annotations

import argparse
import inspect
import json
import logging
import math
import os
import random
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

SPECIAL_TOKENS = (ENDOFTEXT, IM_START, IM_END) = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
TAG_TOKENS = ("<think>", "</think>", "<answer>", "</answer>")
CORPUS_DATASETS = (
    "chain_sum", "basic_arithmetic", "leg_counting", "spell_backward", "letter_counting",
    "word_sorting", "knights_knaves", "simple_equations", "number_sorting", "family_relationships",
)  # fmt: skip
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
_REQUIRED_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json")
# what a warm-started model records about how it was built (absent for a plain random model)
WARM_START_RECORD = "warm_start.json"

# Options of the supervised warm start (see :func:`run_warm_start`) and their defaults.
WARM_START_DEFAULTS: dict[str, Any] = {
    "steps": 150,  # optimizer steps (after 60 the format is not yet reachable by sampling)
    "batch_size": 16,  # sequences per step
    "lr": 3e-3,  # AdamW learning rate
    "format_rate": 0.3,  # share of training responses in the strict think/answer format
    "datasets": {"chain_sum": {}},  # reasoning-gym dataset name -> its config, for the prompts
    "system_prompt": "default",  # a key of reasoning_gym.utils.SYSTEM_PROMPTS, or literal text
    "num_prompts": 256,  # distinct prompts drawn from (each step picks batch_size of them)
    "seed": 0,  # prompts, formats, batch order and the torch RNG
}
# Seeds of the warm start's reasoning-gym items start here: above the train (seed + 0),
# validation (seed + 10**9) and evaluation (seed + 2*10**9) seed spaces of rg_verl.data.dataset
# for any base seed below 10**9, so the warm start never sees an item RL trains or validates on.
WARM_START_SEED_BASE = 3 * 10**9
_THOUGHTS = ("let me think", "work it out", "step by step", "check the numbers", "read the question", "count them")


def _corpus(seed: int, size: int = 200) -> Iterator[str]:
    """Yield tokenizer training text: system prompts and reasoning-gym questions/answers."""
    import reasoning_gym
    from reasoning_gym.utils import SYSTEM_PROMPTS

    yield from SYSTEM_PROMPTS.values()
    for name in CORPUS_DATASETS:
        for entry in reasoning_gym.create_dataset(name, size=size, seed=seed):
            yield f"system\nuser\n{entry['question']}\nassistant\n{entry['answer']}\n"


def _train_tokenizer(vocab_size: int, seed: int, model_max_length: int) -> Any:
    """Train a byte-level BPE tokenizer and wrap it in a ``PreTrainedTokenizerFast``."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    n_added = len(SPECIAL_TOKENS) + len(TAG_TOKENS)
    if vocab_size < len(alphabet) + n_added:
        raise ValueError(f"vocab_size must be >= {len(alphabet) + n_added}, got {vocab_size}")
    tok = Tokenizer(models.BPE())
    # Same pipeline as transformers' Qwen2Tokenizer: AutoTokenizer picks that class for model_type
    # "qwen2" and rebuilds normalizer/pre-tokenizer around our vocab, so they must agree.
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - n_added, initial_alphabet=alphabet, min_frequency=2, show_progress=False
    )
    tok.train_from_iterator(_corpus(seed), trainer=trainer)
    # Added after training (as in Qwen) so they sit at the end of the vocab and are never split.
    # The tags are not "special", so skip_special_tokens=True keeps them when decoding.
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TAG_TOKENS])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        chat_template=CHAT_TEMPLATE,
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
    )


def _is_complete(path: Path) -> bool:
    """Whether ``path`` holds a config, weights and tokenizer files."""
    return all((path / f).is_file() for f in _REQUIRED_FILES) and any((path / f).is_file() for f in _WEIGHT_FILES)


def warm_start_options(options: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``options`` completed with :data:`WARM_START_DEFAULTS`, as plain JSON types; None stays None.

    ``datasets`` may be a list of names or a mapping name -> config (or -> ``{weight, config}``,
    the shape of ``reasoning_gym.datasets``; the weight is ignored: datasets take turns).

    Raises:
        ValueError: On an unknown option or an out-of-range value.
    """
    if options is None:
        return None
    unknown = sorted(set(options) - set(WARM_START_DEFAULTS))
    if unknown:
        raise ValueError(f"warm_start: unknown option(s) {unknown}; valid: {', '.join(WARM_START_DEFAULTS)}")
    merged = {**WARM_START_DEFAULTS, **options}
    datasets = merged["datasets"]
    if isinstance(datasets, str):
        datasets = [datasets]
    if not isinstance(datasets, Mapping):
        datasets = {name: {} for name in datasets}
    normalized = {}
    for name, value in datasets.items():
        value = dict(value or {})
        if set(value) <= {"weight", "config"} and value:  # the reasoning_gym.datasets shape
            value = dict(value.get("config") or {})
        normalized[str(name)] = value
    if not normalized:
        raise ValueError("warm_start.datasets is empty")
    merged["datasets"] = normalized
    for key in ("steps", "batch_size", "num_prompts"):
        merged[key] = int(merged[key])
        if merged[key] < 1:
            raise ValueError(f"warm_start.{key} must be >= 1, got {merged[key]}")
    merged["lr"] = float(merged["lr"])
    merged["format_rate"] = float(merged["format_rate"])
    if not 0.0 <= merged["format_rate"] <= 1.0:
        raise ValueError(f"warm_start.format_rate must be in [0, 1], got {merged['format_rate']}")
    merged["seed"] = int(merged["seed"])
    return json.loads(json.dumps(merged))  # plain JSON types: comparable with the saved record


def warm_start_response(answer: str, formatted: bool, rng: random.Random) -> str:
    """A short training response: strict think/answer format when ``formatted``, else free text.

    Both kinds carry the same answer, so the two differ in their format only. Free text is a
    plain sentence, or a bare ``<answer>`` block (the lenient format, without the think block).

    >>> warm_start_response("7", True, random.Random(0))
    '<think>\\ncheck the numbers\\n</think>\\n<answer>7</answer>'
    """
    thought = rng.choice(_THOUGHTS)
    if formatted:
        return f"<think>\n{thought}\n</think>\n<answer>{answer}</answer>"
    return rng.choice(
        (f"{thought}. The answer is {answer}.", f"{answer}", f"{thought}: {answer}", f"<answer>{answer}</answer>")
    )


def _warm_start_prompts(tokenizer: Any, options: dict[str, Any]) -> list[tuple[list[int], str]]:
    """(prompt token ids, answer) pairs: chat-formatted reasoning-gym items, datasets taking turns."""
    import reasoning_gym
    from reasoning_gym.utils import SYSTEM_PROMPTS

    names = list(options["datasets"])
    count = -(-options["num_prompts"] // len(names))
    system = SYSTEM_PROMPTS.get(options["system_prompt"], options["system_prompt"])
    items: dict[str, list[dict]] = {}
    for offset, name in enumerate(names):
        seed = WARM_START_SEED_BASE + options["seed"] * 1000 + offset
        items[name] = list(reasoning_gym.create_dataset(name, **options["datasets"][name], seed=seed, size=count))
    prompts = []
    for i in range(options["num_prompts"]):
        entry = items[names[i % len(names)]][i // len(names)]
        messages = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": str(entry["question"])}
        ]
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        prompts.append((tokenizer(text, add_special_tokens=False)["input_ids"], str(entry["answer"])))
    return prompts


def run_warm_start(model: Any, tokenizer: Any, options: Mapping[str, Any] | None = None) -> dict[str, float]:
    """Short supervised next-token training of ``model`` in place (see the module docstring).

    Each step draws ``batch_size`` prompts and, for each, a fresh coin with probability
    ``format_rate`` for a strictly formatted response, so the model learns that rate for every
    prompt rather than one format per prompt. The loss covers the response and its
    ``<|im_end|>`` only. Runs on one torch thread, so a ``seed`` gives the same weights on any
    machine with the same torch build.

    Returns:
        ``loss_first`` and ``loss_last``: the training loss of the first and last step.
    """
    import torch

    opts = warm_start_options(options or {})
    rng = random.Random(opts["seed"])
    torch.manual_seed(opts["seed"])
    threads = torch.get_num_threads()
    # one thread: the same reductions in the same order whatever the machine's core count (and a
    # model this small gains little from more; on a busy 2-core machine one thread is faster)
    torch.set_num_threads(1)
    try:
        return _train(model, tokenizer, opts, rng)
    finally:
        torch.set_num_threads(threads)


def _train(model: Any, tokenizer: Any, opts: dict[str, Any], rng: random.Random) -> dict[str, float]:
    import torch

    prompts = _warm_start_prompts(tokenizer, opts)
    eos_id, pad_id = tokenizer.convert_tokens_to_ids([IM_END, ENDOFTEXT])
    optimizer = torch.optim.AdamW(model.parameters(), lr=opts["lr"], weight_decay=0.0)
    model.train()
    losses = []
    for _ in range(opts["steps"]):
        rows = []
        for prompt_ids, answer in rng.sample(prompts, min(opts["batch_size"], len(prompts))):
            text = warm_start_response(answer, rng.random() < opts["format_rate"], rng)
            response_ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [eos_id]
            rows.append((prompt_ids, response_ids))
        width = max(len(p) + len(r) for p, r in rows)
        input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
        attention = torch.zeros((len(rows), width), dtype=torch.long)
        labels = torch.full((len(rows), width), -100, dtype=torch.long)
        for row, (prompt_ids, response_ids) in enumerate(rows):
            ids = prompt_ids + response_ids
            input_ids[row, : len(ids)] = torch.tensor(ids)
            attention[row, : len(ids)] = 1
            labels[row, len(prompt_ids) : len(ids)] = torch.tensor(response_ids)
        loss = model(input_ids=input_ids, attention_mask=attention, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    model.eval()
    return {"loss_first": losses[0], "loss_last": losses[-1]}


def _build_record(path: Path) -> dict[str, Any] | None:
    """The build options a warm-started model recorded, or None for a plain model."""
    record = path / WARM_START_RECORD
    return json.loads(record.read_text())["options"] if record.is_file() else None


def build_tiny_model(
    out_dir: str | os.PathLike,
    *,
    seed: int = 0,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 128,
    vocab_size: int = 1024,
    max_position_embeddings: int = 2048,
    warm_start: Mapping[str, Any] | None = None,
) -> Path:
    """Build a tiny random Qwen2 model plus tokenizer and save both into ``out_dir``.

    Everything goes to a temporary sibling directory renamed into place at the end, so an
    interrupted build never leaves a half-written model behind.

    Args:
        out_dir: Target directory; must not exist or must be empty.
        seed: Seeds the tokenizer corpus and the weight init (same seed -> identical files).
        vocab_size: Target tokenizer size; the embedding is padded up to a multiple of 8.
        warm_start: If given, options of a supervised warm start (:data:`WARM_START_DEFAULTS`
            fills the missing ones) run after the random init; the options, the other build
            arguments and the warm start's losses are saved in ``warm_start.json``.

    Returns:
        The resolved output directory.

    Raises:
        FileExistsError: If ``out_dir`` is not empty (or becomes so while building).
    """
    build_args = {k: v for k, v in locals().items() if k not in ("out_dir", "warm_start")}  # the int options
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    warm_options = warm_start_options(warm_start)
    out = Path(out_dir).resolve()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(f"Refusing to build tiny model: {out} exists and is not empty")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        tokenizer = _train_tokenizer(vocab_size, seed, max_position_embeddings)
        pad_id, eos_id = tokenizer.convert_tokens_to_ids([ENDOFTEXT, IM_END])
        config = Qwen2Config(
            vocab_size=math.ceil(len(tokenizer) / 8) * 8,
            hidden_size=hidden_size,
            intermediate_size=intermediate_size,
            num_hidden_layers=num_layers,
            num_attention_heads=num_heads,
            num_key_value_heads=num_kv_heads,
            max_position_embeddings=max_position_embeddings,
            tie_word_embeddings=True,
            bos_token_id=pad_id,
            eos_token_id=eos_id,
            pad_token_id=pad_id,
            dtype="float32",
            attn_implementation="sdpa",
        )
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
        model.generation_config = GenerationConfig(bos_token_id=pad_id, eos_token_id=eos_id, pad_token_id=pad_id)
        if warm_options is not None:
            losses = run_warm_start(model, tokenizer, warm_options)
            record = {"options": {**build_args, "warm_start": warm_options}, "losses": losses}
            (tmp / WARM_START_RECORD).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
            logger.info("Warm-started tiny model: loss %.3f -> %.3f", losses["loss_first"], losses["loss_last"])
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        for f in [tmp, *tmp.iterdir()]:  # mkdtemp makes the directory 0700
            f.chmod(0o755 if f.is_dir() else 0o644)
        try:
            os.rename(tmp, out)  # atomic; replaces an empty directory, fails on a non-empty one
        except OSError as err:
            raise FileExistsError(f"Refusing to build tiny model: {out} appeared while building") from err
        logger.info("Built tiny Qwen2 model (vocab %d) at %s", len(tokenizer), out)
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _check_reusable(out: Path, kwargs: dict[str, Any]) -> None:
    """Refuse to reuse a model whose warm start (or lack of one) differs from the request.

    A plain model records nothing, so a plain request reuses any plain model as before; when
    either side is warm-started, every build argument must match the record.
    """
    recorded = _build_record(out)
    if recorded is None and kwargs.get("warm_start") is None:
        return
    defaults = {
        name: param.default
        for name, param in inspect.signature(build_tiny_model).parameters.items()
        if param.kind is inspect.Parameter.KEYWORD_ONLY
    }
    requested = {**defaults, **kwargs, "warm_start": warm_start_options(kwargs.get("warm_start"))}
    if recorded != requested:
        raise FileExistsError(
            f"{out} holds a tiny model built with other options (recorded: {recorded}; requested: {requested}); "
            "delete it or point the config at another directory"
        )


def ensure_tiny_model(out_dir: str | os.PathLike, **kwargs: Any) -> Path:
    """Return ``out_dir`` if it already holds a complete model, otherwise build it there.

    Safe for concurrent callers: each builds in its own temporary directory and whoever loses
    the final rename uses the winner's model. ``kwargs`` go to :func:`build_tiny_model`.

    Raises:
        FileExistsError: If ``out_dir`` is not empty but holds no complete model, or holds a
            model whose warm start differs from ``kwargs["warm_start"]`` (see ``warm_start.json``).
    """
    out = Path(out_dir).resolve()
    if _is_complete(out):
        _check_reusable(out, kwargs)
        logger.debug("Reusing tiny model at %s", out)
        return out
    try:
        return build_tiny_model(out, **kwargs)
    except FileExistsError:
        if _is_complete(out):
            logger.debug("Another process built the tiny model at %s first; using it", out)
            _check_reusable(out, kwargs)
            return out
        raise


def main(argv: Sequence[str] | None = None) -> None:
    """Command line: ``python -m rg_verl.tiny_model DIR [--seed N] [--hidden-size N] ... [--force]``."""
    from safetensors import safe_open

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    for name, param in inspect.signature(build_tiny_model).parameters.items():
        if param.kind is inspect.Parameter.KEYWORD_ONLY and isinstance(param.default, int):
            parser.add_argument(f"--{name.replace('_', '-')}", type=int, default=param.default)
    example = json.dumps({"steps": 150, "format_rate": 0.3})
    parser.add_argument("--warm-start", type=json.loads, metavar="JSON", help=f"warm start options, e.g. '{example}'")
    parser.add_argument("--force", action="store_true", help="delete out_dir first if it exists")
    args = vars(parser.parse_args(argv))
    out_dir, force = args.pop("out_dir"), args.pop("force")
    if force and out_dir.exists():
        shutil.rmtree(out_dir) if out_dir.is_dir() else out_dir.unlink()
    logging.basicConfig(level=logging.INFO)
    out = build_tiny_model(out_dir, **args)
    with safe_open(out / "model.safetensors", "pt") as f:  # tied embeddings are stored once
        n_params = sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())
    print(f"Wrote tiny model to {out} ({n_params:,} parameters)")


if __name__ == "__main__":
    main()
