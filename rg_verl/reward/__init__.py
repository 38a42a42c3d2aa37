"""The reward: extract the final answer, score it, add the configured extra terms (``docs/reward.md``).

verl calls ``compute_score`` (``reward.custom_reward_function: {path: pkg://rg_verl.reward, name: compute_score}``);
the evaluator and the demo call the same function.
"""

from rg_verl.reward.extraction import extract_answer, response_answer
from rg_verl.reward.score import compute_score

__all__ = ["compute_score", "extract_answer", "response_answer"]
