"""Means per label: the per-dataset metrics of GRPO's steps and of OREO's training and validation."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

__all__ = ["per_group_means"]


def per_group_means(values: Sequence[float], groups: Sequence[object]) -> dict[str, float]:
    """The mean of ``values`` per group label (labels as strings, keys sorted), e.g. per ``data_source``.

    >>> per_group_means([1.0, 0.0, 0.5], ["b", "a", "b"])
    {'a': 0.0, 'b': 0.75}
    """
    value_list = [float(v) for v in values]
    group_list = [str(g) for g in groups]
    if len(value_list) != len(group_list):
        raise ValueError(
            f"values and groups must have the same length, got {len(value_list)} values and {len(group_list)} groups"
        )
    collected: dict[str, list[float]] = defaultdict(list)
    for value, group in zip(value_list, group_list, strict=True):
        collected[group].append(value)
    return {group: float(np.mean(collected[group])) for group in sorted(collected)}
