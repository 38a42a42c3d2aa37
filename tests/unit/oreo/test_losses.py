"""OREO's losses on engine-shaped micro-batches, against the per-sequence reference (tests/oreo_reference.py)."""

import math
import pickle
from dataclasses import dataclass, replace
from functools import partial

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from verl.utils import tensordict_utils as tu
from verl.utils.metric import AggregationType

from rg_verl.oreo.losses import (
    KL_TYPES,
    OreoLossConfig,
    kl_terms,
    oreo_policy_loss,
    oreo_value_loss,
    policy_loss_terms,
    value_loss_terms,
)
from tests import oreo_reference as ref

VARIANTS = ("token", "step", "response")
FAST = settings(max_examples=40, deadline=None)


@dataclass(frozen=True)
class Seq:
    """One trajectory's per-token data (response length T) and its prompt length."""

    prompt_len: int
    lp: list[float]
    ref: list[float]
    old: list[float]
    values: list[float]
    ret: float
    step_start: list[float]

    @property
    def returns(self) -> list[float]:
        return [self.ret] * len(self.lp)


small = st.floats(-2, 2, allow_nan=False, width=32)


@st.composite
def sequences(draw, max_len: int = 6):
    n = draw(st.integers(1, max_len))
    column = st.lists(small, min_size=n, max_size=n)
    starts = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    return Seq(
        prompt_len=draw(st.integers(1, 3)),
        lp=draw(column),
        ref=draw(column),
        old=draw(column),
        values=draw(column),
        ret=draw(st.sampled_from([0.0, 1.0]) | small),
        step_start=[float(s) for s in starts],
    )


batches = st.lists(sequences(), min_size=1, max_size=5)
betas = st.sampled_from([0.0, 0.03, 0.5, 1.0])


def nested(rows, dtype=torch.float32):
    return torch.nested.as_nested_tensor([torch.tensor(r, dtype=dtype) for r in rows], layout=torch.jagged)


def make_batch(seqs, *, dp_size=1, global_batch_size=None, **extra_meta):
    """A micro-batch as verl's engine hands it to the loss: jagged nested tensors plus non-tensor data."""
    lengths = [len(s.lp) for s in seqs]
    tensors = {
        "input_ids": nested([[1] * (s.prompt_len + n) for s, n in zip(seqs, lengths, strict=False)], torch.long),
        "loss_mask": nested([[0] * s.prompt_len + [1] * n for s, n in zip(seqs, lengths, strict=False)], torch.long),
        "prompts": nested([[1] * s.prompt_len for s in seqs], torch.long),
        "responses": nested([[2] * n for n in lengths], torch.long),
        "response_mask": nested([[1] * n for n in lengths], torch.long),
        "returns": nested([s.returns for s in seqs]),
        "ref_log_prob": nested([s.ref for s in seqs]),
        "old_log_probs": nested([s.old for s in seqs]),
        "values": nested([s.values for s in seqs]),
        "step_start": nested([s.step_start for s in seqs]),
    }
    meta = {
        "dp_size": dp_size,
        "batch_num_tokens": sum(lengths) * dp_size,
        "global_batch_size": len(seqs) if global_batch_size is None else global_batch_size,
        "temperature": 1.0,
        **extra_meta,
    }
    return tu.get_tensordict(tensors, meta)


def model_output(seqs, field: str):
    """A whole-row model output (nested [B, prompt + response]) holding ``field`` where the losses must read it
    (position prompt_len − 1 + t for response token t) and NaN everywhere else, so a misaligned read shows.
    Returns the nested tensor and its flat leaf (for gradients) with the positions read."""
    flat, positions, offset = [], [], 0
    for s in seqs:
        row = [math.nan] * (s.prompt_len + len(s.lp))
        for t, value in enumerate(getattr(s, field)):
            row[s.prompt_len - 1 + t] = value
            positions.append(offset + s.prompt_len - 1 + t)
        flat += row
        offset += len(row)
    leaf = torch.tensor(flat, requires_grad=True)
    offsets = torch.tensor([0] + [s.prompt_len + len(s.lp) for s in seqs]).cumsum(0)
    return torch.nested.nested_tensor_from_jagged(leaf, offsets), leaf, positions


def value_loss_of(seqs, config, **meta):
    out, leaf, positions = model_output(seqs, "values")
    loss, metrics = oreo_value_loss(config, model_output={"values": out}, data=make_batch(seqs, **meta))
    return loss, metrics, leaf, positions


def policy_loss_of(seqs, config, **meta):
    out, leaf, positions = model_output(seqs, "lp")
    loss, metrics = oreo_policy_loss(config, model_output={"log_probs": out}, data=make_batch(seqs, **meta))
    return loss, metrics, leaf, positions


def ref_value_mean(seqs, beta):
    return sum(ref.value_loss(s.values, s.returns, s.old, s.ref, beta) for s in seqs) / len(seqs)


def ref_policy_parts(seqs, variant, beta, kl_type="low_var_kl"):
    policy = sum(ref.policy_loss(variant, s.lp, s.ref, s.values, s.returns, s.step_start, beta) for s in seqs)
    kl = sum(ref.kl(s.lp, s.ref, kl_type) for s in seqs)
    return policy / len(seqs), kl / len(seqs)


def close(a, b):
    return a == pytest.approx(b, rel=1e-5, abs=1e-5)


# --- the config -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [("variant", "tokens"), ("beta", -0.1), ("beta", math.nan), ("alpha", -1.0), ("alpha", True), ("kl_type", "full")],
)
def test_config_rejects_bad_values_naming_the_field(field, value):
    with pytest.raises(ValueError, match=f"OreoLossConfig.{field}"):
        OreoLossConfig(**{field: value})


def test_config_defaults_are_the_papers_and_the_losses_pickle():
    config = OreoLossConfig()
    assert (config.variant, config.beta, config.alpha, config.kl_type) == ("token", 0.03, 0.01, "low_var_kl")
    for fn in (oreo_value_loss, oreo_policy_loss):
        restored = pickle.loads(pickle.dumps(partial(fn, OreoLossConfig(variant="step"))))
        assert restored.func is fn and restored.args == (OreoLossConfig(variant="step"),)


# --- equal to the reference -------------------------------------------------------------------------------------


def split_ranks(seqs):
    half = (len(seqs) + 1) // 2
    return [seqs[:half], seqs[half:]]


@FAST
@given(seqs=batches, beta=betas)
def test_value_loss_equals_the_reference_at_dp_1_and_2(seqs, beta):
    config = OreoLossConfig(beta=beta)
    expected = ref_value_mean(seqs, beta)
    loss, metrics, _, _ = value_loss_of(seqs, config)
    assert close(loss.item(), expected)
    assert close(metrics["oreo/value_loss"].aggregate(), expected)
    assert metrics["oreo/value_loss"].aggregation == AggregationType.SUM
    if len(seqs) >= 2:  # FSDP averages the two ranks' gradients: the mean of their losses is the global mean
        ranks = [value_loss_of(part, config, dp_size=2, global_batch_size=len(seqs))[0] for part in split_ranks(seqs)]
        assert close(sum(r.item() for r in ranks) / 2, expected)


@FAST
@given(seqs=batches, beta=betas, variant=st.sampled_from(VARIANTS), alpha=st.sampled_from([0.0, 0.01, 0.3]))
def test_policy_loss_equals_the_reference_at_dp_1_and_2(seqs, beta, variant, alpha):
    config = OreoLossConfig(variant=variant, beta=beta, alpha=alpha)
    policy, kl = ref_policy_parts(seqs, variant, beta)
    loss, metrics, _, _ = policy_loss_of(seqs, config)
    assert close(loss.item(), policy + alpha * kl)
    assert close(metrics["oreo/policy_loss"].aggregate(), policy)
    assert close(metrics["oreo/kl"].aggregate(), kl)
    if len(seqs) >= 2:
        ranks = [policy_loss_of(part, config, dp_size=2, global_batch_size=len(seqs))[0] for part in split_ranks(seqs)]
        assert close(sum(r.item() for r in ranks) / 2, policy + alpha * kl)


@FAST
@given(seqs=st.lists(sequences(), min_size=2, max_size=6), data=st.data())
def test_micro_batch_losses_sum_to_the_whole_batch_loss(seqs, data):
    cut = data.draw(st.integers(1, len(seqs) - 1))
    variant = data.draw(st.sampled_from(VARIANTS))
    config = OreoLossConfig(variant=variant, beta=0.5, alpha=0.1)
    whole = make_batch(seqs)
    parts = [list(range(cut)), list(range(cut, len(seqs)))]
    for key, field, fn in (("values", "values", oreo_value_loss), ("log_probs", "lp", oreo_policy_loss)):
        total, metric_sum = 0.0, 0.0
        for rows in parts:  # micro-batches cut from the whole batch, as the engine cuts them
            micro = tu.index_select_tensor_dict(whole, rows)
            out = model_output([seqs[i] for i in rows], field)[0]
            loss, metrics = fn(config, model_output={key: out}, data=micro)
            total += loss.item()
            metric_sum += sum(m.aggregate() for name, m in metrics.items() if name.endswith("_loss"))
        out = model_output(seqs, field)[0]
        expected, metrics = fn(config, model_output={key: out}, data=whole)
        assert close(total, expected.item())
        assert close(metric_sum, sum(m.aggregate() for name, m in metrics.items() if name.endswith("_loss")))


@pytest.mark.parametrize("kl_type", KL_TYPES)
def test_kl_terms_are_verls_estimators_averaged_per_sequence(kl_type):
    generator = torch.Generator().manual_seed(0)
    lp, ref_lp = torch.randn(3, 5, generator=generator), torch.randn(3, 5, generator=generator)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 0, 0, 0, 0]], dtype=torch.bool)
    got = kl_terms(lp, ref_lp, mask, kl_type)
    for b in range(3):
        n = int(mask[b].sum())
        assert close(got[b].item(), ref.kl(lp[b, :n].tolist(), ref_lp[b, :n].tolist(), kl_type))


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_value_metrics_give_the_range_and_mean_of_v_over_response_tokens_only(sign):
    # all of one sign: a padded column (0) read as a value would move the min (or the max) to 0
    seqs = [
        Seq(2, [0.0] * 3, [0.0] * 3, [0.0] * 3, [sign * v for v in (0.5, 1.0, 2.5)], 1.0, [1.0] * 3),
        Seq(1, [0.0], [0.0], [0.0], [sign * 3.0], 0.0, [1.0]),
    ]
    _, metrics, _, _ = value_loss_of(seqs, OreoLossConfig())
    low, high = sorted([sign * 0.5, sign * 3.0])
    assert metrics["oreo/value_min"].aggregate() == low
    assert metrics["oreo/value_max"].aggregate() == high
    assert close(metrics["oreo/value_mean"].aggregate(), sign * (4.0 / 3 + 3.0) / 2)


def _row_losses(variant, lp, ref_lp, old, values, mask, starts):
    returns = torch.ones_like(lp)
    return torch.stack([
        value_loss_terms(values, returns, old, ref_lp, mask, 0.5),
        policy_loss_terms(lp, ref_lp, values, returns, mask, starts, variant, 0.5),
        kl_terms(lp, ref_lp, mask, "low_var_kl"),
    ])  # fmt: skip


@pytest.mark.parametrize("variant", VARIANTS)
def test_padded_columns_never_reach_a_loss(variant):
    """Whatever sits in the padding (here NaN and large numbers), a row's losses are those of its own tokens."""
    generator = torch.Generator().manual_seed(1)
    lp, ref_lp, old, values = (torch.randn(2, 4, generator=generator) for _ in range(4))
    starts = torch.tensor([[1.0, 0.0, 1.0, 1.0], [1.0, 1.0, 1.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.bool)
    fills = (math.nan, 50.0, math.nan, 9.0)
    junk = [t.masked_fill(~mask, fill) for t, fill in zip((lp, ref_lp, old, values), fills, strict=False)]
    got = _row_losses(variant, *junk, mask, starts.masked_fill(~mask, 1.0))
    alone = _row_losses(variant, *(t[1:, :2] for t in (lp, ref_lp, old, values)), mask[1:, :2], starts[1:, :2])
    assert torch.isfinite(got).all()
    assert torch.allclose(got[:, 1], alone[:, 0])


def test_a_recorded_max_response_len_wider_than_the_batch_changes_nothing():
    seqs = [Seq(2, [0.1, -0.2], [0.0, 0.3], [0.2, 0.2], [0.5, 0.1], 1.0, [1.0, 0.0])]
    config = OreoLossConfig(variant="step", beta=0.5)
    base = policy_loss_of(seqs, config)[0]
    assert close(policy_loss_of(seqs, config, max_response_len=5)[0].item(), base.item())


# --- gradients --------------------------------------------------------------------------------------------------


def grads_at(leaf, positions):
    return leaf.grad[positions].tolist()


@FAST
@given(seqs=batches, beta=st.sampled_from([0.03, 0.5]))
def test_token_policy_gradient_is_2_beta_times_the_soft_error_over_t(seqs, beta):
    loss, _, leaf, positions = policy_loss_of(seqs, OreoLossConfig(beta=beta, alpha=0.0))
    loss.backward()
    expected = []
    for s in seqs:
        rho = [a - b for a, b in zip(s.lp, s.ref, strict=False)]
        n = len(rho)
        expected += [2 * beta * (s.values[t] - s.ret + beta * sum(rho[t:])) / n / len(seqs) for t in range(n)]
    assert grads_at(leaf, positions) == pytest.approx(expected, rel=1e-4, abs=1e-6)
    others = torch.ones_like(leaf, dtype=torch.bool)
    others[positions] = False
    assert not leaf.grad[others].any()  # nothing reaches the prompt or the row's last position


@FAST
@given(seqs=batches)
def test_step_policy_gradient_is_equal_within_a_step(seqs):
    beta = 0.5
    loss, _, leaf, positions = policy_loss_of(seqs, OreoLossConfig(variant="step", beta=beta, alpha=0.0))
    loss.backward()
    grads, at = grads_at(leaf, positions), 0
    for s in seqs:
        rho = [a - b for a, b in zip(s.lp, s.ref, strict=False)]
        groups = ref.steps(s.step_start)
        rho_step = [sum(rho[t] for t in g) for g in groups]
        for k, group in enumerate(groups):
            error = s.values[group[0]] - s.ret + beta * sum(rho_step[k:])
            expected = 2 * beta * error / len(groups) / len(seqs)
            assert [grads[at + t] for t in group] == pytest.approx([expected] * len(group), rel=1e-4, abs=1e-6)
        at += len(rho)


def test_value_loss_sends_no_gradient_to_log_probs_and_policy_loss_none_to_values():
    old = torch.tensor([[0.3, -0.1, 0.2]], requires_grad=True)
    ref_lp = torch.tensor([[0.1, 0.4, -0.3]], requires_grad=True)
    values = torch.tensor([[0.2, 0.5, 0.9]], requires_grad=True)
    returns, mask = torch.ones(1, 3), torch.ones(1, 3, dtype=torch.bool)
    value_loss_terms(values, returns, old, ref_lp, mask, beta=0.5).sum().backward()
    assert old.grad is None and ref_lp.grad is None and values.grad.abs().sum() > 0
    for variant in VARIANTS:
        values.grad, lp = None, old.detach().clone().requires_grad_(True)
        policy_loss_terms(lp, ref_lp.detach(), values, returns, mask, torch.ones(1, 3), variant, 0.5).sum().backward()
        assert values.grad is None and lp.grad.abs().sum() > 0


def test_value_gradient_reaches_only_the_read_positions():
    seqs = [Seq(2, [0.0] * 2, [0.1, 0.2], [0.3, -0.4], [0.5, 0.6], 1.0, [1.0] * 2)]
    loss, _, leaf, positions = value_loss_of(seqs, OreoLossConfig(beta=0.5))
    loss.backward()
    rho = [0.2, -0.6]
    expected = [2 * (0.5 - 1.0 + 0.5 * sum(rho)) / 2, 2 * (0.6 - 1.0 + 0.5 * rho[1]) / 2]
    assert grads_at(leaf, positions) == pytest.approx(expected, rel=1e-5)
    assert leaf.grad.abs().sum().item() == pytest.approx(sum(abs(g) for g in expected), rel=1e-5)


# --- limits -----------------------------------------------------------------------------------------------------


@FAST
@given(seqs=batches)
def test_with_beta_0_the_value_target_is_the_return(seqs):
    loss = value_loss_of(seqs, OreoLossConfig(beta=0.0))[0].item()
    expected = sum(sum((v - s.ret) ** 2 for v in s.values) / len(s.values) for s in seqs) / len(seqs)
    assert close(loss, expected)


@FAST
@given(seqs=batches, variant=st.sampled_from(VARIANTS))
def test_a_perfect_value_and_no_log_ratio_give_zero_policy_loss(seqs, variant):
    perfect = [replace(s, ref=list(s.lp), values=s.returns) for s in seqs]
    loss = policy_loss_of(perfect, OreoLossConfig(variant=variant, beta=0.5, alpha=0.0))[0]
    assert loss.item() == pytest.approx(0.0, abs=1e-10)


@FAST
@given(seqs=batches, noise=small)
def test_the_response_variant_reads_only_the_first_state(seqs, noise):
    config = OreoLossConfig(variant="response", beta=0.5, alpha=0.0)
    moved = [replace(s, values=[s.values[0]] + [v + noise for v in s.values[1:]]) for s in seqs]
    assert close(policy_loss_of(moved, config)[0].item(), policy_loss_of(seqs, config)[0].item())
    loss, _, leaf, positions = policy_loss_of(seqs, config)
    loss.backward()
    grads, at = grads_at(leaf, positions), 0
    for s in seqs:  # Eq. 10 differentiates the whole Σρ: one gradient for every token of the response
        error = s.values[0] - s.ret + 0.5 * sum(a - b for a, b in zip(s.lp, s.ref, strict=False))
        assert grads[at : at + len(s.lp)] == pytest.approx([2 * 0.5 * error / len(seqs)] * len(s.lp), abs=1e-6)
        at += len(s.lp)


# --- errors -----------------------------------------------------------------------------------------------------


def test_a_batch_without_global_batch_size_is_refused_naming_it():
    seqs = [Seq(1, [0.0], [0.0], [0.0], [0.0], 1.0, [1.0])]
    data = make_batch(seqs)
    del data["global_batch_size"]
    with pytest.raises(ValueError, match="global_batch_size"):
        oreo_value_loss(OreoLossConfig(), model_output={"values": model_output(seqs, "values")[0]}, data=data)


def test_a_missing_field_or_a_misaligned_one_is_named():
    seqs = [Seq(1, [0.0, 0.1], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0], 1.0, [1.0, 1.0])]
    out = {"log_probs": model_output(seqs, "lp")[0]}
    data = make_batch(seqs)
    del data["values"]
    with pytest.raises(KeyError, match="values"):
        oreo_policy_loss(OreoLossConfig(), model_output=out, data=data)
    data = make_batch(seqs)
    data["returns"] = nested([[1.0]])
    with pytest.raises(ValueError, match="returns"):
        oreo_policy_loss(OreoLossConfig(), model_output=out, data=data)
