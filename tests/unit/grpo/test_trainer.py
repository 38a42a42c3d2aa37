"""The trainer's pure helpers: per-dataset reward means and validation self-correction rates."""


import pytest

from rg_verl.grpo.trainer import grouped_means, self_correction_rates


def test_self_correction_rate_is_the_share_of_revising_responses_that_self_corrected():
    metrics = {
        "val-aux/reasoning_gym/chain_sum/revised/mean@4": 0.5,
        "val-aux/reasoning_gym/chain_sum/self_corrected/mean@4": 0.125,
        "val-aux/reasoning_gym/chain_sum/revised/mean@2": 0.25,
        "val-aux/reasoning_gym/chain_sum/self_corrected/mean@2": 0.25,
        # nothing revised: no rate (not 0/0)
        "val-aux/math/gsm8k/revised/mean@4": 0.0,
        "val-aux/math/gsm8k/self_corrected/mean@4": 0.0,
        # other statistics of the flags are not rates
        "val-aux/reasoning_gym/chain_sum/revised/std@4": 0.3,
        "val-core/reasoning_gym/chain_sum/reward/mean@4": 1.0,
    }
    assert self_correction_rates(metrics) == {
        "val-aux/reasoning_gym/chain_sum/self_correction_rate/mean@4": pytest.approx(0.25),
        "val-aux/reasoning_gym/chain_sum/self_correction_rate/mean@2": pytest.approx(1.0),
    }


def test_grouped_means_keeps_sources_apart():
    sources = ["math/gsm8k", "reasoning_gym/chain_sum", "math/gsm8k"]
    assert grouped_means(sources, {"accuracy": [1, 0, 0]}) == {
        "train/math/gsm8k/accuracy": 0.5,
        "train/reasoning_gym/chain_sum/accuracy": 0.0,
    }
