"""Tests of rg_verl.evaluation.fields: the value checks of the evaluation config."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rg_verl.common.schema import ConfigError
from rg_verl.evaluation.fields import above_zero, dataset_names, maybe_text, run_name, text


@given(st.one_of(st.floats(allow_nan=True), st.integers(), st.booleans(), st.text(), st.none()))
def test_above_zero_takes_exactly_the_finite_numbers_in_the_interval(value):
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and 0 < value <= 1
    if ok:
        assert above_zero("top_p", value, 1.0) == float(value)
    else:
        with pytest.raises(ConfigError, match=r"top_p: .* is not a number in \(0, 1.0\]"):
            above_zero("top_p", value, 1.0)


def test_text_fields_and_names():
    assert text("model_path", "m") == "m" and maybe_text("x", None) is None
    with pytest.raises(ConfigError, match="model_path: '' is not a non-empty string"):
        text("model_path", "")
    assert run_name("run_name", "mine") == "mine"
    for bad in ("a/b", "..", "."):
        with pytest.raises(ConfigError, match="must be a plain folder name"):
            run_name("run_name", bad)
    assert dataset_names("math_datasets", ["chain_sum"]) == ["chain_sum"]
    with pytest.raises(ConfigError, match=r"math_datasets\[0\]"):
        dataset_names("math_datasets", ["chain_summ"])
    with pytest.raises(ConfigError, match="is not a list of dataset names"):
        dataset_names("math_datasets", "chain_sum")
