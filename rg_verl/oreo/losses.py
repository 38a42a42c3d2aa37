"""OREO's value and policy losses (Offline REasoning Optimization, arXiv 2412.16145), on verl's loss interface."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from tensordict import TensorDict
from verl.trainer.ppo.core_algos import kl_penalty
from verl.utils import tensordict_utils as tu
from verl.utils.metric import AggregationType, Metric
from verl.workers.utils.padding import no_padding_2_padding

__all__ = [
    "KL_TYPES",
    "VARIANTS",
    "OreoLossConfig",
    "kl_terms",
    "oreo_policy_loss",
    "oreo_value_loss",
    "policy_loss_terms",
    "reverse_cumsum",
    "value_loss_terms",
]

VARIANTS = ("token", "step", "response")
# verl's kl_penalty estimators that need only the sampled token's log-probs ("full" needs every logit)
KL_TYPES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")


def _check_weight(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ValueError(f"OreoLossConfig.{name} must be a finite number >= 0, got {value!r}")


@dataclass(frozen=True)
class OreoLossConfig:
    """The settings both OREO losses read: the policy-loss variant, β (Eqs. 8-10) and the KL weight α.

    >>> OreoLossConfig(variant="step", alpha=0.1).variant
    'step'
    """

    variant: str = "token"
    beta: float = 0.03
    alpha: float = 0.01
    kl_type: str = "low_var_kl"

    def __post_init__(self) -> None:
        if self.variant not in VARIANTS:
            raise ValueError(f"OreoLossConfig.variant must be one of {list(VARIANTS)}, got {self.variant!r}")
        _check_weight("beta", self.beta)
        _check_weight("alpha", self.alpha)
        if self.kl_type not in KL_TYPES:
            raise ValueError(
                f"OreoLossConfig.kl_type must be one of {list(KL_TYPES)} (verl's kl_penalty estimators on sampled "
                f"tokens), got {self.kl_type!r}"
            )


def reverse_cumsum(x: torch.Tensor) -> torch.Tensor:
    """Σ_{i≥t} x_i along the last dimension (the tail sums of Eqs. 7-9).

    >>> reverse_cumsum(torch.tensor([[1.0, 2.0, 3.0]])).tolist()
    [[6.0, 5.0, 3.0]]
    """
    return x.flip(-1).cumsum(-1).flip(-1)


def _masked(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    # where, not multiply: a NaN or inf in a padded column must not reach the sums or their gradients
    return torch.where(mask, x, torch.zeros((), dtype=x.dtype, device=x.device))


def _lengths(mask: torch.Tensor) -> torch.Tensor:
    # T_b, at least 1 so that an empty row gives a zero loss instead of 0/0
    return mask.sum(-1).clamp(min=1).to(torch.float32)


def value_loss_terms(
    values: torch.Tensor,
    returns: torch.Tensor,
    old_log_probs: torch.Tensor,
    ref_log_prob: torch.Tensor,
    mask: torch.Tensor,
    beta: float,
) -> torch.Tensor:
    """Eq. 8 per sequence: (1/T_b) Σ_t (V(s_t) − R_t + β Σ_{i≥t} ρ_i)², ρ = old − ref."""
    mask = mask.bool()
    rho = _masked((old_log_probs.float() - ref_log_prob.float()).detach(), mask)
    error = values.float() - returns.float() + beta * reverse_cumsum(rho)
    return _masked(error, mask).square().sum(-1) / _lengths(mask)


def _token_terms(rho, values, returns, mask, beta):
    # Eq. 9: the tail Σ_{i>t} ρ_i enters as a constant, so token t's gradient is scaled by its own error only
    tail = (reverse_cumsum(rho) - rho).detach()
    error = values - returns + beta * rho + beta * tail
    return _masked(error, mask).square().sum(-1) / _lengths(mask)


def _step_index(step_start: torch.Tensor, mask: torch.Tensor):
    """The step of each token (0-based) and the [B, R] start mask; the first response token always starts one."""
    starts = (step_start > 0.5) & mask
    starts[:, :1] |= mask[:, :1]
    step_of = (starts.long().cumsum(-1) - 1).clamp(min=0)
    return step_of, starts


def _step_terms(rho, values, returns, mask, step_start, beta):
    # §4.2: an action is a step; ρ^step_k sums the step's tokens, so each token of step k gets the same gradient
    step_of, starts = _step_index(step_start, mask)
    zeros = torch.zeros_like(rho)
    rho_step = zeros.scatter_add(-1, step_of, rho)
    # each step has exactly one start, so these sums pick V(s_{b_k}) and R at the step's first token
    v_step = zeros.scatter_add(-1, step_of, _masked(values, starts))
    r_step = zeros.scatter_add(-1, step_of, _masked(returns, starts))
    n_steps = starts.sum(-1, keepdim=True)
    valid = torch.arange(rho.shape[-1], device=rho.device).unsqueeze(0) < n_steps
    tail = (reverse_cumsum(rho_step) - rho_step).detach()
    error = v_step - r_step + beta * rho_step + beta * tail
    return _masked(error, valid).square().sum(-1) / _lengths(valid)


def _response_terms(rho, values, returns, mask, beta):
    # Eq. 10: one equation per response, at s_0, with the whole sum Σ_i ρ_i differentiated
    has_tokens = mask[:, 0]
    error = values[:, 0] - returns[:, 0] + beta * rho.sum(-1)
    return _masked(error, has_tokens).square()


def policy_loss_terms(
    log_probs: torch.Tensor,
    ref_log_prob: torch.Tensor,
    values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    step_start: torch.Tensor | None,
    variant: str,
    beta: float,
) -> torch.Tensor:
    """The OREO policy loss per sequence ([B] float32), without the KL term."""
    mask = mask.bool()
    rho = _masked(log_probs.float() - ref_log_prob.float(), mask)
    values = values.detach().float()
    returns = returns.float()
    if variant == "token":
        return _token_terms(rho, values, returns, mask, beta)
    if variant == "step":
        if step_start is None:
            raise ValueError("the step variant needs step_start (1.0 where a response token starts a step)")
        return _step_terms(rho, values, returns, mask, step_start, beta)
    if variant == "response":
        return _response_terms(rho, values, returns, mask, beta)
    raise ValueError(f"variant must be one of {list(VARIANTS)}, got {variant!r}")


def kl_terms(log_probs: torch.Tensor, ref_log_prob: torch.Tensor, mask: torch.Tensor, kl_type: str) -> torch.Tensor:
    """L_reg per sequence ([B]): the mean over response tokens of verl's ``kl_penalty(log_probs, ref, kl_type)``."""
    mask = mask.bool()
    kld = kl_penalty(log_probs.float(), ref_log_prob.float(), kl_type)
    return _masked(kld, mask).sum(-1) / _lengths(mask)


def _scale(data: TensorDict) -> float:
    """dp_size / global_batch_size: a micro-batch's Σ_b loss_b times this sums (and DP-averages) to the mean."""
    dp_size = tu.get_non_tensor_data(data=data, key="dp_size", default=1)
    global_batch_size = tu.get_non_tensor_data(data=data, key="global_batch_size", default=None)
    if not global_batch_size or global_batch_size < 1:
        raise ValueError(
            f"the OREO losses need global_batch_size (trajectories in the global batch over all DP ranks) as "
            f"non-tensor data of the batch, got {global_batch_size!r}: set it with "
            f"verl.utils.tensordict_utils.assign_non_tensor(batch, global_batch_size=G)"
        )
    return float(dp_size) / float(global_batch_size)


def _check_lengths(data: TensorDict, fields: list[str]) -> None:
    """Every nested per-token field must have one entry per response token, row by row."""
    responses = data["responses"]
    if not responses.is_nested:
        return
    expected = responses.offsets().diff()
    for name in fields:
        field = data[name]
        if field.is_nested and not torch.equal(field.offsets().diff().to(expected.device), expected):
            raise ValueError(
                f"batch field {name!r} must have one entry per response token in every row (the lengths of "
                f"'responses'), got lengths {field.offsets().diff().tolist()} for {expected.tolist()}"
            )


def _padded_fields(data: TensorDict, model_tensor: torch.Tensor, fields: list[str]):
    """The model output's response columns [B, R] and the data fields padded to the same width."""
    missing = [name for name in fields if name not in data.keys()]
    if missing:
        raise KeyError(f"the OREO loss needs the batch fields {missing}; the batch has {sorted(data.keys())}")
    _check_lengths(data, fields)
    padded = data.select(*fields).to_padded_tensor()
    response = no_padding_2_padding(model_tensor, data)
    # each field pads to a width of its own, all at least the longest response: the narrowest drops padding only
    width = min(response.shape[-1], *(padded[name].shape[-1] for name in fields))
    padded = {name: padded[name][:, :width] for name in fields}
    return response[:, :width], padded, padded["response_mask"].bool()


def _value_stats(values: torch.Tensor, mask: torch.Tensor, scale: float) -> dict[str, Metric]:
    """V's mean (per trajectory, then over the global batch: SUM-aggregated) and its min / max over the tokens."""
    values = values.detach().float()
    per_seq_mean = _masked(values, mask).sum(-1) / _lengths(mask)
    kept = values[mask]
    low, high = (kept.min().item(), kept.max().item()) if kept.numel() else (math.inf, -math.inf)
    return {
        "oreo/value_mean": Metric(AggregationType.SUM, per_seq_mean.sum() * scale),
        "oreo/value_min": Metric(AggregationType.MIN, low),
        "oreo/value_max": Metric(AggregationType.MAX, high),
    }


def oreo_value_loss(config: OreoLossConfig, model_output, data: TensorDict, dp_group=None):
    """The critic's loss (Eq. 8) for verl's ``value_model`` engine: ``worker.set_loss_fn(partial(fn, config))``."""
    fields = ["response_mask", "returns", "old_log_probs", "ref_log_prob"]
    values, padded, mask = _padded_fields(data, model_output["values"], fields)
    scale = _scale(data)
    per_seq = value_loss_terms(
        values, padded["returns"], padded["old_log_probs"], padded["ref_log_prob"], mask, config.beta
    )
    loss = per_seq.sum() * scale
    metrics = {"oreo/value_loss": Metric(AggregationType.SUM, loss.detach())}
    metrics.update(_value_stats(values, mask, scale))
    return loss, metrics


def oreo_policy_loss(config: OreoLossConfig, model_output, data: TensorDict, dp_group=None):
    """The actor's loss for verl's ``language_model`` engine: the policy loss of ``config.variant`` + α × KL."""
    fields = ["response_mask", "ref_log_prob", "values", "returns"]
    if config.variant == "step":
        fields.append("step_start")
    log_probs, padded, mask = _padded_fields(data, model_output["log_probs"], fields)
    scale = _scale(data)
    ref = padded["ref_log_prob"]
    step_start = padded["step_start"] if config.variant == "step" else None
    policy = policy_loss_terms(
        log_probs, ref, padded["values"], padded["returns"], mask, step_start, config.variant, config.beta
    )
    policy_loss = policy.sum() * scale
    kl = kl_terms(log_probs, ref, mask, config.kl_type).sum() * scale
    loss = policy_loss + config.alpha * kl
    metrics = {
        "oreo/policy_loss": Metric(AggregationType.SUM, policy_loss.detach()),
        "oreo/kl": Metric(AggregationType.SUM, kl.detach()),
    }
    return loss, metrics
