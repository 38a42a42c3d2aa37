"""The reward (``docs/reward.md``): ``compute_score``, which verl, the evaluator and the demo call."""

from rg_verl.reward.extraction import extract_answer, response_answer
from rg_verl.reward.score import compute_score

__all__ = ["compute_score", "extract_answer", "response_answer"]
