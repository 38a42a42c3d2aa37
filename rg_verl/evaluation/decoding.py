"""The evaluation config's ``decoding:`` section: plain sampling, or OREO's value-guided search (``value_beam``,
``value_rerank``), whose value model's files are checked before any weights load.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rg_verl.common.schema import ConfigError, maybe_text, option
from rg_verl.common.tokenizer import tokenizer_fingerprint

__all__ = ["DECODING_MODES", "DecodingConfig", "check_value_model"]

DECODING_MODES = ("sample", "value_beam", "value_rerank")

SEARCH_POLICIES = ("hf", "vllm")
# a model folder with one of these has a tokenizer of its own
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def _delimiters(where: str, value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(d, str) and d for d in value):
        raise ConfigError(f"{where}: {value!r} is not a list of non-empty strings; set e.g. ['\\n']")
    return list(value)


@dataclass
class DecodingConfig:
    """How each item's completions are chosen."""

    mode: str = option("sample", "sample, value_beam or value_rerank", choices=DECODING_MODES, noun="mode")
    value_model: str | None = option(
        None, "the value model folder of the value modes (a converted OREO critic)", parse=maybe_text
    )
    beam_width: int = option(3, "value_beam: live beams per item, and steps sampled per beam", low=1, high=64)
    max_steps: int = option(20, "value_beam: the most steps per answer", low=1, high=10**4)
    step_delimiters: list[str] = option(["\n"], "value_beam: the texts that end a step", parse=_delimiters)
    step_max_tokens: int = option(256, "value_beam: the most tokens per step", low=1, high=10**6)
    samples: int = option(8, "value_rerank: whole responses sampled per item (the K of best-of-K)", low=1, high=10**4)
    seed: int | None = option(None, "the value modes' sampling seed; none: unseeded", low=0, high=2**31 - 1)

    def validate(self, where: str) -> None:
        if self.mode != "sample" and self.value_model is None:
            raise ConfigError(
                f"{where}.value_model: decoding mode {self.mode} scores candidates with a value model; set the "
                "folder of a converted OREO critic (python utils/load_fsdp_to_hf.py <ckpt>/global_step_N/critic <out>)"
            )

    def check_for(self, backend: str, eval_repeats: int, where: str = "decoding") -> None:
        """The checks that read other fields of the evaluation config."""
        if self.mode == "sample":
            return
        if backend not in SEARCH_POLICIES:
            raise ConfigError(
                f"backend: {backend!r}; decoding mode {self.mode} runs the policy and the value model side by "
                f"side, on the {' or '.join(SEARCH_POLICIES)} backend (a server has no value model beside it); "
                "set backend: hf or vllm"
            )
        beam = self.mode == "value_beam"
        budget, knob = (self.beam_width**2 * self.max_steps, "beam_width") if beam else (self.samples, "samples")
        if eval_repeats > budget:
            raise ConfigError(
                f"eval_repeats: {eval_repeats} answers per item, but {where}.mode {self.mode} makes at most "
                f"{budget}; lower eval_repeats or raise {where}.{knob}"
            )


def _json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ConfigError(f"{path}: cannot read it ({error}); convert the critic again") from None


def check_value_model(value_model: str, policy: str) -> None:
    """The value model's folder against the policy's, from their configs and tokenizers (no weights load)."""
    folder, policy_folder = Path(value_model), Path(policy)
    if not (folder / "config.json").is_file():
        raise ConfigError(
            f"decoding.value_model: {folder} has no config.json; give the folder of a converted OREO critic "
            "(python utils/load_fsdp_to_hf.py <ckpt>/global_step_N/critic <out>)"
        )
    config = _json(folder / "config.json")
    labels = config.get("num_labels", len(config.get("id2label") or {0: ""}))
    if labels != 1:
        raise ConfigError(f"decoding.value_model: {folder} has {labels} labels; a value model has one")
    if (policy_folder / "config.json").is_file():
        vocab, policy_vocab = config.get("vocab_size"), _json(policy_folder / "config.json").get("vocab_size")
        if vocab != policy_vocab:
            raise ConfigError(
                f"decoding.value_model: its vocabulary has {vocab} tokens, the policy's ({policy}) {policy_vocab}; "
                "use the critic trained with this policy"
            )
    if policy_folder.is_dir() and any((folder / name).is_file() for name in TOKENIZER_FILES):
        from transformers import AutoTokenizer

        if tokenizer_fingerprint(AutoTokenizer.from_pretrained(folder)) != tokenizer_fingerprint(
            AutoTokenizer.from_pretrained(policy_folder)
        ):
            raise ConfigError(
                f"decoding.value_model: its tokenizer differs from the policy's ({policy}); the value model reads "
                "the policy's token ids, so both need one tokenizer: use the critic trained with this policy"
            )
