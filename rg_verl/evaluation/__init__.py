"""Evaluate a model on reasoning-gym items: batched generation, the reward's scorer, the usual metrics.

    python evaluation/evaluate_model.py --config evaluation/configs/smoke.yaml [--model-path DIR] [--resume]

Modules, in the order data flows through them:

- ``config``: the YAML schema (:class:`EvalConfig`), validated without reading a data file;
- ``items``: evaluation items from ``rg_verl.data.dataset`` (the ``eval`` seed space), one dataset per entry;
- ``backends``: ``vllm`` | ``hf`` | ``openai`` in one dict, :data:`BACKENDS`;
- ``runner``: check the data files, generate, score with ``rg_verl.reward.compute_score``, append to
  items.jsonl (``store``), resume;
- ``metrics``: pass@k, mean@k, maj@k, strict/lenient accuracy and the rest, from per-completion scores;
- ``report``: results.json, summary.md, scores.png;
- ``cli``: the command line; ``demo``: ``rg-verl demo``, one question or item at a time;
- ``lmeh``: the MATH rule of the llama_math_algebra lm-eval task (evaluation/lmeh), not used by the evaluator.
"""

from rg_verl.evaluation.backends import BACKENDS, Completion, Sampling, create_backend
from rg_verl.evaluation.config import EvalConfig, load_config, parse_config
from rg_verl.evaluation.runner import evaluate

__all__ = [
    "BACKENDS",
    "Completion",
    "EvalConfig",
    "Sampling",
    "create_backend",
    "evaluate",
    "load_config",
    "parse_config",
]
