"""The record a "wrong, try again" episode leaves under ``extra_info["retry"]``, and what the reward reads from it.

>>> record = {"turn_accuracy": [0.0, 1.0], "final_response": "<answer>4</answer>", "max_turns": 3, "discount": 0.5}
>>> episode_values(record)
{'discount': 0.5, 'turns': 2.0, 'solved_by_turn_1': 0.0, 'solved_by_turn_2': 1.0, 'solved_by_turn_3': 1.0}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["EPISODE_KEY", "episode_values", "is_episode"]


EPISODE_KEY = "retry"


def is_episode(extra_info: Any) -> bool:
    """Whether an item's ``extra_info`` carries an episode's record."""
    return isinstance(extra_info, Mapping) and isinstance(extra_info.get(EPISODE_KEY), Mapping)


def episode_values(record: Mapping[str, Any]) -> dict[str, float]:
    """The reward's factor (``discount``) and the per-turn outcomes of an episode's record."""
    accuracies = [float(a) for a in record["turn_accuracy"]]
    turns, max_turns = len(accuracies), int(record["max_turns"])
    values = {"discount": float(record["discount"]) ** (turns - 1), "turns": float(turns)}
    for j in range(1, max_turns + 1):
        values[f"solved_by_turn_{j}"] = float(any(a >= 1.0 for a in accuracies[:j]))
    return values
