"""Summaries of an OREO critic: how well values separate right from wrong trajectories (AUC), and their range."""

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
    """The area under the ROC curve of ``scores`` for 0/1 ``labels`` (ties count one half); NaN when a class is absent.

    >>> roc_auc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]), roc_auc([1.0, 1.0], [0, 1])
    (0.75, 0.5)
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
