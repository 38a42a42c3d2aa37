"""Summaries of an OREO critic: how well values separate right from wrong trajectories, and their range.

The value model is trained to predict the soft return (paper Eq. 7), so on held-out trajectories V at a fixed
state should rank successful trajectories above failed ones. :func:`roc_auc` measures that ranking (0.5 is
chance), :func:`describe` gives the range the training log shows (as OREO logs V min / max).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = ["describe", "roc_auc"]


def _finite_vector(name: str, values) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64).reshape(-1)
    if not np.isfinite(array).all():
        raise ValueError(f"{name} must be finite numbers; found NaN or inf")
    return array


def _binary_labels(labels, n: int) -> np.ndarray:
    array = np.asarray(labels).reshape(-1)
    if array.shape[0] != n:
        raise ValueError(f"scores and labels must have the same length, got {n} scores and {array.shape[0]} labels")
    if array.size and not np.isin(array, (0, 1)).all():
        raise ValueError("labels must be 0/1 or booleans (1 = success), e.g. accuracy == 1")
    return array.astype(bool)


def _average_ranks(scores: np.ndarray) -> np.ndarray:
    """1-based ranks, tied scores sharing the mean of the ranks they span."""
    _, inverse, counts = np.unique(scores, return_inverse=True, return_counts=True)
    first_rank = np.cumsum(counts) - counts + 1
    return (first_rank + (counts - 1) / 2.0)[inverse]


def roc_auc(scores: Sequence[float], labels: Sequence[int | bool]) -> float:
    """The area under the ROC curve of ``scores`` for ``labels`` (1 / True = positive).

    It is the Mann-Whitney U statistic over n₁·n₀: the share of (positive, negative) pairs where the positive
    scores higher, a tie counting one half. NaN when either class is absent, as no pair exists.

    Raises:
        ValueError: If the lengths differ, a score is not finite, or a label is not 0/1.

    >>> roc_auc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1])
    0.75
    >>> roc_auc([1.0, 1.0], [0, 1])
    0.5
    >>> math.isnan(roc_auc([0.3, 0.7], [1, 1]))
    True
    """
    score_array = _finite_vector("scores", scores)
    positive = _binary_labels(labels, score_array.shape[0])
    n_pos = int(positive.sum())
    n_neg = positive.shape[0] - n_pos
    if n_pos == 0 or n_neg == 0:
        return math.nan
    ranks = _average_ranks(score_array)
    u_statistic = ranks[positive].sum() - n_pos * (n_pos + 1) / 2.0
    return float(u_statistic / (n_pos * n_neg))



def describe(values: Sequence[float]) -> dict[str, float]:
    """``mean``, ``median``, ``min`` and ``max`` of ``values`` (all NaN when there are none).

    OREO logs the value range and the median log-ratio sum of successful and failed trajectories; this is the one
    summary both need.

    >>> describe([0.0, 1.0, 5.0])
    {'mean': 2.0, 'median': 1.0, 'min': 0.0, 'max': 5.0}
    """
    array = np.asarray(values, dtype=np.float64).reshape(-1)
    if array.size == 0:
        return {"mean": math.nan, "median": math.nan, "min": math.nan, "max": math.nan}
    return {
        "mean": float(array.mean()),
        "median": float(np.median(array)),
        "min": float(array.min()),
        "max": float(array.max()),
    }
