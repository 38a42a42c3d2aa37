"""The reward's keyword arguments (``reward.custom_reward_function.reward_kwargs``), declared once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rg_verl.common.names import GATES, MODES, TERM_NAMES
from rg_verl.common.schema import ConfigError, check, option, parse_section, plain
from rg_verl.data.config import dataset_names

__all__ = ["REWARD_KWARGS", "ReferenceTermsConfig", "RewardConfig"]

REWARD_KWARGS = "reward.custom_reward_function.reward_kwargs"


def _term_map(where: str, value: Any, noun: str, example: str, item: Any) -> dict[str, Any]:
    """A mapping of registered term names to values that ``item(where, value)`` checks."""
    value = plain(value) or {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: {value!r} is not a mapping; set {{term: {noun}}}, e.g. {example}")
    for name in value:
        if name not in TERM_NAMES:
            raise ConfigError(f"{where}.{name}: unknown reward term; valid terms: {', '.join(sorted(TERM_NAMES))}")
    return {name: item(f"{where}.{name}", entry) for name, entry in value.items()}


def _parse_terms(where: str, value: Any) -> dict[str, float]:
    return _term_map(where, value, "weight", "{format: 0.2}", lambda w, weight: check(w, float, weight))


def _gate(where: str, gate: Any) -> str:
    if gate not in GATES:
        raise ConfigError(f"{where}: {gate!r} is not a gate; valid gates: {', '.join(GATES)}")
    return gate


def _parse_gates(where: str, value: Any) -> dict[str, str]:
    gates = _term_map(where, value, "gate", "{format: correct}", _gate)
    return {name: gate for name, gate in gates.items() if gate != "none"}


@dataclass
class ReferenceTermsConfig:
    """``reward_kwargs.reference_terms``: the options of the ``reference_*`` terms (``rg_verl.reward.terms``)."""

    max_output_length: int = option(
        1024, "characters at which reference_length reaches its full value", low=1, high=10**9
    )
    preappend_thinking_token: bool = option(
        False, "reference_format puts <think> before the response first (for prompts that end in <think>)"
    )


@dataclass
class RewardConfig:
    """``reward.custom_reward_function.reward_kwargs``: the keyword arguments of ``rg_verl.reward.compute_score``."""

    mode: str = option(
        "lenient",
        "the extraction that gives the reward: strict (exactly <think>…</think><answer>…</answer>) or lenient "
        "(the last <answer>)",
        choices=MODES,
        noun="mode",
    )
    terms: dict[str, float] = option(
        {},
        "extra terms added to correctness, name -> weight (rg_verl/reward/terms.py); 0 disables a term",
        parse=_parse_terms,
    )
    gates: dict[str, str] = option(
        {},
        "when a term counts, name -> gate: none (every response), correct or incorrect (only when the answer is "
        "right, or wrong)",
        parse=_parse_gates,
    )
    tokenizer_path: str | None = option(
        None, "tokenizer for response lengths in tokens", doc_default="actor_rollout_ref.model.path"
    )
    max_response_length: int | None = option(
        None, "the response budget the length terms are relative to", low=1, doc_default="data.max_response_length"
    )
    math_datasets: list[str] = option(
        [],
        "reasoning-gym datasets scored by math-verify's symbolic equivalence instead of their own scorer",
        parse=lambda where, value: dataset_names(where, plain(value) or []),  # blank: none
    )
    reference_terms: ReferenceTermsConfig = option(
        ReferenceTermsConfig, "options of the reference_format, reference_length and reference_cosine terms"
    )
    response_prefix: str = option(
        "auto",
        "text the chat template opens the assistant turn with (a thinking model's <think>), judged before the "
        "response by the format rules; auto: read off the tokenizer at tokenizer_path "
        "(rg_verl/common/chat_template.py)",
    )
    chat_template_kwargs: dict | None = option(
        None,
        "the chat-template arguments auto renders the template with",
        doc_default="data.apply_chat_template_kwargs",
    )

    @classmethod
    def from_section(cls, section: Any, where: str = REWARD_KWARGS) -> RewardConfig:
        """Parse and check ``reward_kwargs`` (a mapping, None for every default)."""
        return parse_section(cls, section, where)

    def validate(self, where: str) -> None:
        if (self.terms.get("length") or self.terms.get("cosine")) and not (
            self.tokenizer_path and self.max_response_length
        ):
            raise ConfigError(
                f"{where}: the length and cosine terms count tokens; set tokenizer_path and max_response_length "
                "(the reference_length and reference_cosine terms count characters and need neither)"
            )
