"""Evaluate a model on reasoning-gym items: batched generation, the reward's scorer, the usual metrics.

``docs/evaluation.md`` describes the config, the backends, the metrics and the reports.
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
