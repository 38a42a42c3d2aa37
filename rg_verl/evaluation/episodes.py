"""The evaluator's "wrong, try again" episodes (:mod:`rg_verl.retry`), one ``generate`` call per round of tries.

>>> from rg_verl.evaluation.backends.base import Completion
>>> episode = Episode([Completion("<answer>3</answer>"), Completion("<answer>4</answer>")], [0.0, 1.0])
>>> [m["role"] for m in episode.conversation([{"role": "user", "content": "2+2?"}], "Wrong.")]
['user', 'assistant', 'user', 'assistant', 'user']
>>> episode.final.text, episode.num_tokens
('<answer>4</answer>', None)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rg_verl.evaluation.backends.base import Backend, Completion, Messages, Sampling
from rg_verl.retry.episode import RetryConfig

__all__ = ["Episode", "run_episodes"]


@dataclass
class Episode:
    """One completion's tries, in order, and the correctness of each (1.0 or 0.0)."""

    tries: list[Completion]
    accuracies: list[float]

    @property
    def final(self) -> Completion:
        return self.tries[-1]

    @property
    def num_tokens(self) -> int | None:
        """The tokens the model wrote over every try; None where the backend cannot tell."""
        counts = [c.num_tokens for c in self.tries]
        return None if None in counts else sum(counts)

    def conversation(self, prompt: Messages, feedback: str) -> Messages:
        """The prompt, then each try as an assistant turn followed by the feedback turn: what the next try sees."""
        turns = [[{"role": "assistant", "content": c.text}, {"role": "user", "content": feedback}] for c in self.tries]
        return [*prompt, *(message for pair in turns for message in pair)]


def run_episodes(
    backend: Backend,
    prompts: list[Messages],
    n: int,
    sampling: Sampling,
    retry: RetryConfig,
    judge: Callable[[int, str], float],
) -> list[list[Episode]]:
    """``n`` episodes per prompt, each ending at its first right answer (``judge``: 1.0) or ``retry.max_turns``."""
    first = backend.generate(prompts, n, sampling)
    episodes = [[Episode([c], [judge(i, c.text)]) for c in completions] for i, completions in enumerate(first)]
    for _ in range(1, retry.max_turns):
        still_open = [(i, e) for i, row in enumerate(episodes) for e in row if e.accuracies[-1] < 1.0]
        if not still_open:
            break
        outputs = backend.generate([e.conversation(prompts[i], retry.feedback) for i, e in still_open], 1, sampling)
        if len(outputs) != len(still_open) or any(len(o) != 1 for o in outputs):
            raise RuntimeError("the backend returned the wrong number of completions for the episodes' next tries")
        for (i, episode), [completion] in zip(still_open, outputs, strict=True):
            episode.tries.append(completion)
            episode.accuracies.append(judge(i, completion.text))
    return episodes
