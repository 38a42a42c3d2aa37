"""What a "wrong, try again" episode is: its settings (the ``retry:`` section), its record and its reward.

An episode gives the model up to ``max_turns`` tries at one question. After a wrong answer, while tries remain,
a user turn says so (``feedback``) and the model answers again. The rollout (:mod:`rg_verl.retry.agent_loop`) and
the evaluator (:mod:`rg_verl.evaluation.episodes`) both record an episode as :func:`episode_record`: the
correctness of each try and the text of the last one. The reward (``rg_verl.reward.compute_score``) finds the
record under ``extra_info["retry"]`` and scores the last try, multiplied by ``discount`` for every try after the
first (:func:`episode_values`), with the per-turn outcomes beside it:

- ``turns``: the tries the episode took;
- ``solved_by_turn_<j>`` for j = 1 … ``max_turns``: 1.0 when a try up to the j-th was right. Their means are
  success@turn-j (training logs them per dataset, validation as verl's ``val-aux/<source>/solved_by_turn_<j>``).

>>> record = episode_record([0.0, 1.0], "<answer>4</answer>", RetryConfig(max_turns=3, discount=0.5))
>>> episode_values(record)
{'discount': 0.5, 'turns': 2.0, 'solved_by_turn_1': 0.0, 'solved_by_turn_2': 1.0, 'solved_by_turn_3': 1.0}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rg_verl.schema import ConfigError, option, parse_section

__all__ = ["AGENT_LOOP", "EPISODE_KEY", "RetryConfig", "episode_record", "episode_values", "is_episode"]

# the name the agent loop is registered under (actor_rollout_ref.rollout.agent.default_agent_loop)
AGENT_LOOP = "rg_verl_retry"
# the key of the episode's record in the reward's extra_info
EPISODE_KEY = "retry"
DEFAULT_FEEDBACK = "Your answer is wrong. Think again and give your corrected final answer in the same format."


@dataclass
class RetryConfig:
    """The ``retry:`` section: a "wrong, try again" episode's settings."""

    max_turns: int = option(3, "the most answers an episode may give (1: single-turn)", low=1, high=64)
    feedback: str = option(DEFAULT_FEEDBACK, "the user turn that follows a wrong answer while tries remain")
    discount: float = option(
        0.8, "the reward is multiplied by this for every try after the first, in [0, 1]", low=0.0, high=1.0
    )

    @classmethod
    def from_section(cls, section: Any, where: str = "retry") -> RetryConfig:
        return parse_section(cls, section, where)

    def validate(self, where: str) -> None:
        if not self.feedback.strip():
            raise ConfigError(f"{where}.feedback: empty; set the text the model reads after a wrong answer")


def episode_record(accuracies: Sequence[float], final_response: str, config: RetryConfig) -> dict[str, Any]:
    """The record an episode leaves for the reward: each try's correctness (1.0 or 0.0) and the last try's text."""
    if not accuracies or len(accuracies) > config.max_turns:
        raise ValueError(f"an episode takes 1 to {config.max_turns} tries, got {len(accuracies)}")
    return {
        "turn_accuracy": [float(a) for a in accuracies],
        "final_response": final_response,
        "max_turns": config.max_turns,
        "discount": config.discount,
    }


def is_episode(extra_info: Any) -> bool:
    """Whether an item's ``extra_info`` carries an episode's record."""
    return isinstance(extra_info, Mapping) and isinstance(extra_info.get(EPISODE_KEY), Mapping)


def episode_values(record: Mapping[str, Any]) -> dict[str, float]:
    """The reward's factor (``discount``) and the per-turn outcomes of an :func:`episode_record`."""
    accuracies = [float(a) for a in record["turn_accuracy"]]
    turns, max_turns = len(accuracies), int(record["max_turns"])
    values = {"discount": float(record["discount"]) ** (turns - 1), "turns": float(turns)}
    for j in range(1, max_turns + 1):
        values[f"solved_by_turn_{j}"] = float(any(a >= 1.0 for a in accuracies[:j]))
    return values
