"""Test-only verl plugin: the ``negated_grpo`` advantage estimator, minus verl's GRPO advantage.

The negative control of tests/e2e/test_learning.py: the same run as the learning check, with every
advantage's sign flipped, must not learn. It needs no code change in rg-verl or verl: verl imports
the modules named in ``VERL_USE_EXTERNAL_MODULES`` in every process, and this one registers the
estimator through verl's public registry, selected with ``algorithm.adv_estimator=negated_grpo``.

Load it with ``PYTHONPATH=<repo>/tests VERL_USE_EXTERNAL_MODULES=negated_grpo`` (the module name
is top-level on purpose: verl's wheel installs a ``tests`` package of its own).
"""

from typing import Any

import numpy as np
import torch
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage, register_adv_est

NAME = "negated_grpo"


@register_adv_est(NAME)
def compute_negated_grpo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool | None = None,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl's GRPO outcome advantage (and return), negated.

    verl calls a registered estimator with ``token_level_rewards``, ``response_mask``, ``index``
    (the prompt uid of each response) and ``config`` (the algorithm config); the GRPO std
    normalisation follows ``algorithm.norm_adv_by_std_in_grpo`` as for ``grpo``.
    """
    if norm_adv_by_std_in_grpo is None:
        norm_adv_by_std_in_grpo = True if config is None else bool(config.get("norm_adv_by_std_in_grpo", True))
    advantages, returns = compute_grpo_outcome_advantage(
        token_level_rewards=token_level_rewards,
        response_mask=response_mask,
        index=index,
        epsilon=epsilon,
        norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo,
        config=config,
    )
    return -advantages, -returns
