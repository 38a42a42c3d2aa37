"""The record a "wrong, try again" episode leaves for the reward, and what the reward reads from it.

An episode (:mod:`rg_verl.retry`: the rollout's agent loop, the evaluator's episodes) gives the model up to
``max_turns`` tries at one question and records, under ``extra_info["retry"]`` (:data:`EPISODE_KEY`), the
correctness of each try (``turn_accuracy``), the last try's text (``final_response``), ``max_turns`` and
``discount`` (``rg_verl.retry.episode.episode_record`` writes it). The reward scores the last try, multiplied by
``discount`` for every try after the first (:func:`episode_values`), with the per-turn outcomes beside it:

- ``turns``: the tries the episode took;
- ``solved_by_turn_<j>`` for j = 1 … ``max_turns``: 1.0 when a try up to the j-th was right. Their means are
  success@turn-j (training logs them per dataset, validation as verl's ``val-aux/<source>/solved_by_turn_<j>``).

>>> record = {"turn_accuracy": [0.0, 1.0], "final_response": "<answer>4</answer>", "max_turns": 3, "discount": 0.5}
>>> episode_values(record)
{'discount': 0.5, 'turns': 2.0, 'solved_by_turn_1': 0.0, 'solved_by_turn_2': 1.0, 'solved_by_turn_3': 1.0}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["EPISODE_KEY", "episode_values", "is_episode"]

# the key of the episode's record in the reward's extra_info
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
