"""Build a tiny, randomly initialised Qwen2 causal LM with a locally trained tokenizer."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import os
import shutil
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rg_verl.common.atomic import PublishError, staging_dir
from rg_verl.common.names import TAGS
from rg_verl.common.schema import ConfigError, option, parse_section
from rg_verl.cpu.warm_start import WARM_START_RECORD, WarmStartOptions, run_warm_start, warm_start_options

__all__ = [
    "TinyModelConfig",
    "TinyModelOptions",
    "build_tiny_model",
    "ensure_tiny_model",
]

logger = logging.getLogger(__name__)

SPECIAL_TOKENS = (ENDOFTEXT, IM_START, IM_END) = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
CORPUS_DATASETS = (
    "chain_sum", "basic_arithmetic", "leg_counting", "spell_backward", "letter_counting",
    "word_sorting", "knights_knaves", "simple_equations", "number_sorting", "family_relationships",
)  # fmt: skip
_TURNS = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
)
CHAT_TEMPLATE = _TURNS + "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
# as Qwen3's thinking templates: the assistant turn opens <think>, or an empty think block with enable_thinking=False
THINKING_CHAT_TEMPLATE = _TURNS + (
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- else %}{{- '<think>\\n' }}{%- endif %}"
    "{%- endif %}"
)
_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
_REQUIRED_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json")


# the tokenizer's least size: byte-level BPE's alphabet of 256 bytes, then the special tokens and the tags
MIN_VOCAB_SIZE = 256 + len(SPECIAL_TOKENS) + len(TAGS)


@dataclass(frozen=True)
class TinyModelOptions:
    """The sizes and seed of a tiny model: the keyword options of :func:`build_tiny_model` but ``warm_start``."""

    seed: int = option(0, "seeds the tokenizer corpus and the weight init; the same seed gives identical files")
    hidden_size: int = option(64, "the model's width: num_heads times an even head size", low=2)
    num_layers: int = option(2, "transformer layers", low=1)
    num_heads: int = option(4, "attention heads", low=1)
    num_kv_heads: int = option(2, "key-value heads (grouped-query attention); divides num_heads", low=1)
    intermediate_size: int = option(128, "the MLP's width", low=1)
    vocab_size: int = option(
        1024, "the tokenizer's target size; the embedding is padded up to a multiple of 8", low=MIN_VOCAB_SIZE
    )
    max_position_embeddings: int = option(2048, "the longest sequence, in tokens (the tokenizer's too)", low=1)
    thinking_template: bool = option(
        False, "the chat template opens the assistant turn with <think>, as a thinking model's (Qwen3's) does"
    )

    def validate(self, where: str) -> None:
        head_size, rest = divmod(self.hidden_size, self.num_heads)
        if rest or head_size % 2:  # rotary embeddings rotate pairs of a head's dimensions
            raise ConfigError(
                f"{where}.hidden_size: {self.hidden_size} is not num_heads={self.num_heads} times an even "
                "head size; change hidden_size or num_heads"
            )
        if self.num_heads % self.num_kv_heads:
            raise ConfigError(
                f"{where}.num_kv_heads: {self.num_kv_heads} does not divide num_heads={self.num_heads}; "
                "set a divisor"
            )


def _parse_warm_start(where: str, value: Any) -> WarmStartOptions | None:
    return None if value is None else parse_section(WarmStartOptions, value, where)


@dataclass(frozen=True)
class TinyModelConfig(TinyModelOptions):
    """The ``tiny_model`` section of a training config: the options, whether to build, the warm start."""

    build_if_missing: bool = option(
        False, "build the model at actor_rollout_ref.model.path (an absolute path) when it holds none"
    )
    warm_start: WarmStartOptions | None = option(
        None, "a supervised warm start before RL (rg_verl/cpu/warm_start.py); none: a plain random model",
        parse=_parse_warm_start,
    )

    def build_options(self) -> dict[str, Any]:
        """The keyword options of :func:`ensure_tiny_model` that build this section's model."""
        sizes = {f.name: getattr(self, f.name) for f in dataclasses.fields(TinyModelOptions)}
        warm_start = None if self.warm_start is None else dataclasses.asdict(self.warm_start)
        return {**sizes, "warm_start": warm_start}


# Qwen2Config's name of each size option
_QWEN2_NAMES = {
    "hidden_size": "hidden_size",
    "intermediate_size": "intermediate_size",
    "num_layers": "num_hidden_layers",
    "num_heads": "num_attention_heads",
    "num_kv_heads": "num_key_value_heads",
    "max_position_embeddings": "max_position_embeddings",
}


def _corpus(seed: int, size: int = 200) -> Iterator[str]:
    """Yield tokenizer training text: system prompts and reasoning-gym questions/answers."""
    import reasoning_gym
    from reasoning_gym.utils import SYSTEM_PROMPTS

    yield from SYSTEM_PROMPTS.values()
    for name in CORPUS_DATASETS:
        for entry in reasoning_gym.create_dataset(name, size=size, seed=seed):
            yield f"system\nuser\n{entry['question']}\nassistant\n{entry['answer']}\n"


def _train_tokenizer(vocab_size: int, seed: int, model_max_length: int, thinking_template: bool = False) -> Any:
    """Train a byte-level BPE tokenizer and wrap it in a ``PreTrainedTokenizerFast``."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    n_added = len(SPECIAL_TOKENS) + len(TAGS)
    tok = Tokenizer(models.BPE())
    # transformers' Qwen2Tokenizer's pipeline: AutoTokenizer rebuilds it around our vocab for model_type "qwen2"
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
    # added after training, as in Qwen: at the end of the vocab, never split; the tags are not special (kept on decode)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TAGS])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        chat_template=THINKING_CHAT_TEMPLATE if thinking_template else CHAT_TEMPLATE,
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
    )


def _is_complete(path: Path) -> bool:
    """Whether ``path`` holds a config, weights and tokenizer files."""
    return all((path / f).is_file() for f in _REQUIRED_FILES) and any((path / f).is_file() for f in _WEIGHT_FILES)


def _build_record(path: Path) -> dict[str, Any] | None:
    """The build options a warm-started model recorded, or None for a plain model."""
    record = path / WARM_START_RECORD
    return json.loads(record.read_text())["options"] if record.is_file() else None


def _save_model(tmp: Path, options: TinyModelOptions, warm_start: dict[str, Any] | None) -> Any:
    """Train the tokenizer, initialise the model (and warm-start it), save both into ``tmp``; the tokenizer."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    tokenizer = _train_tokenizer(
        options.vocab_size, options.seed, options.max_position_embeddings, options.thinking_template
    )
    pad_id, eos_id = tokenizer.convert_tokens_to_ids([ENDOFTEXT, IM_END])
    config = Qwen2Config(
        vocab_size=math.ceil(len(tokenizer) / 8) * 8,
        **{qwen2: getattr(options, ours) for ours, qwen2 in _QWEN2_NAMES.items()},
        tie_word_embeddings=True,
        bos_token_id=pad_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        dtype="float32",
        attn_implementation="sdpa",
    )
    torch.manual_seed(options.seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(bos_token_id=pad_id, eos_token_id=eos_id, pad_token_id=pad_id)
    if warm_start is not None:
        losses = run_warm_start(model, tokenizer, warm_start)
        record = {"options": {**dataclasses.asdict(options), "warm_start": warm_start}, "losses": losses}
        (tmp / WARM_START_RECORD).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
        logger.info("Warm-started tiny model: loss %.3f -> %.3f", losses["loss_first"], losses["loss_last"])
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    return tokenizer


def build_tiny_model(
    out_dir: str | os.PathLike, *, warm_start: Mapping[str, Any] | None = None, **options: int
) -> Path:
    """Build a tiny random Qwen2 model plus tokenizer and save both into ``out_dir``."""
    sizes = parse_section(TinyModelOptions, options, "tiny_model")
    warm_options = warm_start_options(warm_start)
    out = Path(out_dir).resolve()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(f"Refusing to build tiny model: {out} exists and is not empty")
    try:
        with staging_dir(out) as tmp:
            tokenizer = _save_model(tmp, sizes, warm_options)
    except PublishError as err:
        raise FileExistsError(f"Refusing to build tiny model: {out} appeared while building") from err
    logger.info("Built tiny Qwen2 model (vocab %d) at %s", len(tokenizer), out)
    return out


def _check_reusable(out: Path, kwargs: dict[str, Any]) -> None:
    """Refuse to reuse a model whose warm start (or lack of one) differs from the request."""
    recorded = _build_record(out)
    if recorded is None and kwargs.get("warm_start") is None:
        return
    if recorded is not None:  # a record made before an option existed holds that option's default
        recorded = {**dataclasses.asdict(TinyModelOptions()), **recorded}
    sizes = {key: value for key, value in kwargs.items() if key != "warm_start"}
    requested = {
        **dataclasses.asdict(parse_section(TinyModelOptions, sizes, "tiny_model")),
        "warm_start": warm_start_options(kwargs.get("warm_start")),
    }
    if recorded != requested:
        raise FileExistsError(
            f"{out} holds a tiny model built with other options (recorded: {recorded}; requested: {requested}); "
            "delete it or point the config at another directory"
        )


def ensure_tiny_model(out_dir: str | os.PathLike, **kwargs: Any) -> Path:
    """Return ``out_dir`` if it already holds a complete model, otherwise build it there."""
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
    """Command line: ``python -m rg_verl.cpu.tiny_model DIR [--seed N] [--hidden-size N] ... [--force]``."""
    from safetensors import safe_open

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    for f in dataclasses.fields(TinyModelOptions):
        flag, help_text = f"--{f.name.replace('_', '-')}", f.metadata["help"]
        if isinstance(f.default, bool):
            parser.add_argument(flag, action="store_true", help=help_text)
        else:
            parser.add_argument(flag, type=int, default=f.default, help=help_text)
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
