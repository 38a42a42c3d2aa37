"""The OREO trainer's metrics summary (its alignment check on verl's engines: tests/e2e/test_oreo_alignment.py)."""

from __future__ import annotations

from rg_verl.oreo.trainer import summarise


def test_summarise_reduces_verl_metrics():
    from verl.utils.metric import AggregationType, Metric

    summed = Metric(AggregationType.SUM)
    summed.extend([0.25, 0.5])
    means = [Metric(AggregationType.MEAN), Metric(AggregationType.MEAN)]
    means[0].extend([1.0, 3.0])
    means[1].extend([3.0, 5.0])
    metrics = {
        "oreo/value_loss": summed,
        "oreo/value_max": [1.0, 3.0, 2.0],
        "oreo/value_min": [1.0, -3.0],
        "grad_norm": 2.0,
        "loss": [1.0, 2.0],
        "dp": means,
    }
    assert summarise(metrics) == {
        "oreo/value_loss": 0.75,
        "oreo/value_max": 3.0,
        "oreo/value_min": -3.0,
        "grad_norm": 2.0,
        "loss": 1.5,
        "dp": 3.0,
    }
