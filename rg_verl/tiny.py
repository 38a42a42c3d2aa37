"""Build a tiny, randomly initialised Qwen2 causal LM with a locally trained tokenizer.

Saved with ``save_pretrained`` so ``AutoModelForCausalLM``/``AutoTokenizer`` load it offline;
meant for fast end-to-end tests of the training pipeline.
"""

from __future__ import annotations

import argparse
import inspect
import logging
import math
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
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
) -> Path:
    """Build a tiny random Qwen2 model plus tokenizer and save both into ``out_dir``.

    Everything goes to a temporary sibling directory renamed into place at the end, so an
    interrupted build never leaves a half-written model behind.

    Args:
        out_dir: Target directory; must not exist or must be empty.
        seed: Seeds the tokenizer corpus and the weight init (same seed -> identical files).
        vocab_size: Target tokenizer size; the embedding is padded up to a multiple of 8.

    Returns:
        The resolved output directory.

    Raises:
        FileExistsError: If ``out_dir`` is not empty (or becomes so while building).
    """
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

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


def ensure_tiny_model(out_dir: str | os.PathLike, **kwargs: Any) -> Path:
    """Return ``out_dir`` if it already holds a complete model, otherwise build it there.

    Safe for concurrent callers: each builds in its own temporary directory and whoever loses
    the final rename uses the winner's model. ``kwargs`` go to :func:`build_tiny_model`.
    """
    out = Path(out_dir).resolve()
    if _is_complete(out):
        logger.debug("Reusing tiny model at %s", out)
        return out
    try:
        return build_tiny_model(out, **kwargs)
    except FileExistsError:
        if _is_complete(out):
            logger.debug("Another process built the tiny model at %s first; using it", out)
            return out
        raise


def main(argv: Sequence[str] | None = None) -> None:
    """Command line: ``python -m rg_verl.tiny DIR [--seed N] [--hidden-size N] ... [--force]``."""
    from safetensors import safe_open

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    for name, param in inspect.signature(build_tiny_model).parameters.items():
        if param.kind is inspect.Parameter.KEYWORD_ONLY:
            parser.add_argument(f"--{name.replace('_', '-')}", type=int, default=param.default)
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
