"""What every backend takes and returns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from rg_verl.common.names import Messages

__all__ = ["GREEDY_BELOW", "Backend", "Completion", "Messages", "Sampling"]

# the temperature below which decoding is greedy (vLLM's ``_SAMPLING_EPS``: it refuses n > 1 there)
GREEDY_BELOW = 1e-5


@dataclass(frozen=True)
class Sampling:
    """Sampling settings of one ``generate`` call.

    Args:
        max_tokens: response budget in tokens.
        temperature: 0 (below 1e-5, as vLLM decides) means greedy decoding.
        top_p: nucleus sampling mass.
        seed: None, or the seed of this call's sampling: a backend that can honour it gives the same
            completions for the same prompts, settings and seed (each backend says how).
    """

    max_tokens: int
    temperature: float
    top_p: float
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        """Whether this is greedy decoding: a temperature below vLLM's 1e-5 (``_SAMPLING_EPS``), as vLLM decides."""
        return self.temperature < GREEDY_BELOW


@dataclass(frozen=True)
class Completion:
    """One sampled response.

    Args:
        text: the decoded response.
        num_tokens: its length in tokens, or None where the backend cannot tell.
        token_ids: the generated token ids, up to and including the end-of-sequence token when
            generation stopped on one (no padding); None where the backend does not see them.
        prompt_token_ids: the ids of the prompt the completion was conditioned on (the chat template
            applied); None where the backend does not see them.
    """

    text: str
    num_tokens: int | None = None
    token_ids: tuple[int, ...] | None = None
    prompt_token_ids: tuple[int, ...] | None = None


class Backend(Protocol):
    """The interface of a generation backend (see ``rg_verl.evaluation.backends``).

    A backend class subclasses this one, which gives it the defaults of :meth:`close` and
    :meth:`default_save_every`; its ``__init__(config)`` takes the :class:`~rg_verl.evaluation.config.EvalConfig`.
    """

    def generate(self, prompts: list[Messages], n: int, sampling: Sampling) -> list[list[Completion]]:
        """``n`` completions for each chat prompt, in the prompts' order."""
        ...

    def close(self) -> None:
        """Frees the model or connections; by default there is nothing to free."""

    @classmethod
    def default_save_every(cls, config) -> int:
        """Prompts per ``generate`` call when ``config.save_every`` is 0; by default 0: all at once."""
        return 0
