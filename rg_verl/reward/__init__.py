"""The reward: extract the final answer, score it, add the configured extra terms.

verl calls ``compute_score`` (``reward.custom_reward_function: {path: pkg://rg_verl.reward, name:
compute_score}``); the evaluator and the demo call the same function. Modules, in the order an answer
flows through them:

- ``extraction``: the answer of a response (strict / lenient);
- ``score``: :func:`compute_score`: the data source, both modes, earlier answers, the terms;
- ``sympy_guard``: which answers may reach a scorer that parses with sympy;
- ``time_limit``: scoring in killable worker processes, under a hard time limit (``worker_pool``: the processes);
- ``math_verify``: math-verify's equivalence, for GSM8K, MATH and flagged reasoning-gym datasets;
- ``terms``: the extra terms (format, length, cosine, self-correction, and the reference project's
  reference_format, reference_length, reference_cosine), one dict.
"""

from rg_verl.reward.extraction import extract_answer, response_answer
from rg_verl.reward.score import compute_score

__all__ = ["compute_score", "extract_answer", "response_answer"]
