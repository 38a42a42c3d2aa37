"""OREO's losses written straight from the paper (arXiv 2412.16145), one sequence at a time, in plain Python.

Slow and obvious on purpose: the tests hold rg_verl.oreo.losses (vectorised, on padded batches) to these. Each
function takes one response's per-token lists (column t = the state s_t before response token t) and returns
the loss of that sequence; ρ_t = lp_t − ref_t.
"""

from __future__ import annotations

import math


def _rho(lp: list[float], ref: list[float]) -> list[float]:
    return [a - b for a, b in zip(lp, ref, strict=True)]


def value_loss(values, returns, old_lp, ref, beta: float) -> float:
    """Eq. 8: (1/T) Σ_t (V(s_t) − R_t + β Σ_{i≥t} ρ_i)², ρ from the actor's log-probs."""
    rho = _rho(old_lp, ref)
    n = len(rho)
    return sum((values[t] - returns[t] + beta * sum(rho[t:])) ** 2 for t in range(n)) / n


def token_policy_loss(lp, ref, values, returns, beta: float) -> float:
    """Eq. 9 (its value: sg changes gradients only): (1/T) Σ_t (V(s_t) − R_t + βρ_t + β Σ_{i>t} ρ_i)²."""
    rho = _rho(lp, ref)
    n = len(rho)
    return sum((values[t] - returns[t] + beta * rho[t] + beta * sum(rho[t + 1 :])) ** 2 for t in range(n)) / n


def steps(step_start) -> list[list[int]]:
    """The token indices of each step: a step begins at t = 0 and wherever step_start[t] > 0.5."""
    out: list[list[int]] = []
    for t, flag in enumerate(step_start):
        if t == 0 or flag > 0.5:
            out.append([])
        out[-1].append(t)
    return out


def step_policy_loss(lp, ref, values, returns, step_start, beta: float) -> float:
    """§4.2: (1/K) Σ_k (V(s_{b_k}) − R + β ρ^step_k + β Σ_{j>k} ρ^step_j)², ρ^step_k = Σ_{t in step k} ρ_t."""
    rho = _rho(lp, ref)
    groups = steps(step_start)
    rho_step = [sum(rho[t] for t in group) for group in groups]
    total = 0.0
    for k, group in enumerate(groups):
        first = group[0]
        total += (values[first] - returns[first] + beta * rho_step[k] + beta * sum(rho_step[k + 1 :])) ** 2
    return total / len(groups)


def response_policy_loss(lp, ref, values, returns, beta: float) -> float:
    """Eq. 10: (V(s_0) − R_0 + β Σ_i ρ_i)²."""
    return (values[0] - returns[0] + beta * sum(_rho(lp, ref))) ** 2


def kl_estimate(lp: float, ref: float, kl_type: str) -> float:
    """One sampled token's KL estimate (k1, |k1|, k2, or k3 clamped as verl clamps it)."""
    if kl_type in ("kl", "k1"):
        return lp - ref
    if kl_type == "abs":
        return abs(lp - ref)
    if kl_type in ("mse", "k2"):
        return 0.5 * (lp - ref) ** 2
    if kl_type in ("low_var_kl", "k3"):
        log_ratio = min(max(ref - lp, -20.0), 20.0)
        return min(max(math.exp(log_ratio) - log_ratio - 1.0, -10.0), 10.0)
    raise ValueError(kl_type)


def kl(lp, ref, kl_type: str) -> float:
    """L_reg of one sequence: the mean over its tokens of the sampled-token KL estimate."""
    return sum(kl_estimate(a, b, kl_type) for a, b in zip(lp, ref, strict=True)) / len(lp)


def policy_loss(variant: str, lp, ref, values, returns, step_start, beta: float) -> float:
    """The policy loss of one sequence for ``variant`` (token, step or response), without the KL term."""
    if variant == "token":
        return token_policy_loss(lp, ref, values, returns, beta)
    if variant == "step":
        return step_policy_loss(lp, ref, values, returns, step_start, beta)
    if variant == "response":
        return response_policy_loss(lp, ref, values, returns, beta)
    raise ValueError(variant)
