"""Means per label (rg_verl.common.stats), which GRPO's per-dataset metrics and OREO's use."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rg_verl.common.stats import per_group_means
from rg_verl.grpo.metrics import grouped_means


@settings(max_examples=100, deadline=None)
@given(rows=st.lists(st.tuples(st.floats(-5, 5), st.sampled_from(["a", "b", "c"])), min_size=1, max_size=20))
def test_per_group_means_equal_the_mean_of_each_groups_values(rows):
    got = per_group_means([v for v, _ in rows], [g for _, g in rows])
    assert list(got) == sorted({g for _, g in rows})
    for group, mean in got.items():
        members = [v for v, g in rows if g == group]
        assert mean == pytest.approx(sum(members) / len(members), abs=1e-9)


def test_per_group_means_key_groups_as_strings_and_check_lengths():
    assert per_group_means([1.0, 3.0, 2.0], [0, 0, 1]) == {"0": 2.0, "1": 2.0}
    with pytest.raises(ValueError, match="same length"):
        per_group_means([1.0], ["a", "b"])


def test_grpo_step_metrics_are_each_columns_mean_per_data_source():
    sources = ["a", "b", "a", "b", "c"]
    got = grouped_means(sources, {"score": [1.0, 0.0, 0.0, 1.0, 0.5], "accuracy": [1, 0, 1, 1, 0]})
    assert got == {
        "train/a/score": 0.5, "train/b/score": 0.5, "train/c/score": 0.5,
        "train/a/accuracy": 1.0, "train/b/accuracy": 0.5, "train/c/accuracy": 0.0,
    }  # fmt: skip
