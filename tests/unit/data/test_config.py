"""Tests of rg_verl.data.config's checks of dataset names."""

from __future__ import annotations

import pytest

from rg_verl.common.schema import ConfigError
from rg_verl.data.config import dataset_names


def test_dataset_names_are_a_list_of_registered_datasets():
    assert dataset_names("math_datasets", ["chain_sum"]) == ["chain_sum"]
    with pytest.raises(ConfigError, match=r"math_datasets\[0\]"):
        dataset_names("math_datasets", ["chain_summ"])
    with pytest.raises(ConfigError, match="is not a list of dataset names"):
        dataset_names("math_datasets", "chain_sum")
