"""What every backend takes and returns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from rg_verl.common.names import Messages

__all__ = ["GREEDY_BELOW", "Backend", "Completion", "Messages", "Sampling"]

# vLLM's ``_SAMPLING_EPS``: greedy below it, where it refuses n > 1
GREEDY_BELOW = 1e-5


@dataclass(frozen=True)
class Sampling:
    """Sampling settings of one ``generate`` call; temperature 0 is greedy, ``seed`` honoured where a backend can."""

    max_tokens: int
    temperature: float
    top_p: float
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        """Whether this is greedy decoding, as vLLM decides (a temperature below :data:`GREEDY_BELOW`)."""
        return self.temperature < GREEDY_BELOW


@dataclass(frozen=True)
class Completion:
    """One sampled response; ``token_ids`` end with the end-of-sequence token where it stopped; None where unseen."""

    text: str
    num_tokens: int | None = None
    token_ids: tuple[int, ...] | None = None
    prompt_token_ids: tuple[int, ...] | None = None


class Backend(Protocol):
    """A generation backend: ``__init__(config)``, ``generate(prompts, n, sampling)[i][j]``, defaults for the rest."""

    def generate(self, prompts: list[Messages], n: int, sampling: Sampling) -> list[list[Completion]]:
        """``n`` completions for each chat prompt, in the prompts' order."""
        ...

    def close(self) -> None:
        """Frees the model or connections; by default there is nothing to free."""

    @classmethod
    def default_save_every(cls, config) -> int:
        """Prompts per ``generate`` call when ``config.save_every`` is 0; by default 0: all at once."""
        return 0
