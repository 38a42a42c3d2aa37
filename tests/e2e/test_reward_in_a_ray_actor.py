"""The reward inside a Ray actor, as verl's reward loop runs it: every dataset's reference answer scores 1 there too
(tests/unit/reward/test_score_contexts.py checks the other contexts: threads, daemonic processes)."""

from __future__ import annotations

import pytest

from tests.unit.reward.test_score_contexts import accuracies, cases

pytestmark = pytest.mark.slow


def test_a_ray_actor_scores_every_reference_answer_1():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:

        @ray.remote
        class Scorer:
            def score(self, batch):
                return accuracies(batch)

        # only a hang: beside three busy processes at nice 0, this nice-15 actor's test took 350 s
        found = ray.get(Scorer.remote().score.remote(cases()), timeout=1800)
    finally:
        ray.shutdown()
    assert found == [1.0] * len(cases())
