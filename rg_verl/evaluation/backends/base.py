"""What every backend takes and returns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

Messages = list[dict[str, str]]


@dataclass(frozen=True)
class Sampling:
    """Sampling settings of one ``generate`` call.

    Args:
        max_tokens: response budget in tokens.
        temperature: 0 means greedy decoding.
        top_p: nucleus sampling mass.
    """

    max_tokens: int
    temperature: float
    top_p: float


@dataclass(frozen=True)
class Completion:
    """One sampled response.

    Args:
        text: the decoded response.
        num_tokens: its length in tokens, or None where the backend cannot tell.
    """

    text: str
    num_tokens: int | None = None


class Backend(Protocol):
    """The interface of a generation backend (see ``rg_verl.evaluation.backends``)."""

    def __init__(self, config) -> None: ...

    def generate(self, prompts: list[Messages], n: int, sampling: Sampling) -> list[list[Completion]]:
        """``n`` completions for each chat prompt, in the prompts' order."""
        ...

    def close(self) -> None:
        """Frees the model or connections."""
        ...

    @classmethod
    def default_save_every(cls, config) -> int:
        """Prompts per ``generate`` call when ``config.save_every`` is 0 (0: all at once)."""
        ...
