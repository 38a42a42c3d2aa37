"""What a "wrong, try again" episode is: its settings (the ``retry:`` section) and the record it leaves.

>>> episode_record([0.0, 1.0], "<answer>4</answer>", RetryConfig(max_turns=3, discount=0.5))["turn_accuracy"]
[0.0, 1.0]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rg_verl.common.schema import ConfigError, option, parse_section

__all__ = ["AGENT_LOOP", "RetryConfig", "episode_record"]

# the name the agent loop is registered under (actor_rollout_ref.rollout.agent.default_agent_loop)
AGENT_LOOP = "rg_verl_retry"
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
    """The record an episode leaves for the reward: each try's correctness and the last try's text."""
    if not accuracies or len(accuracies) > config.max_turns:
        raise ValueError(f"an episode takes 1 to {config.max_turns} tries, got {len(accuracies)}")
    return {
        "turn_accuracy": [float(a) for a in accuracies],
        "final_response": final_response,
        "max_turns": config.max_turns,
        "discount": config.discount,
    }

