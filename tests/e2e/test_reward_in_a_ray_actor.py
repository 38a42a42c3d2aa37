"""The reward inside a Ray actor, as verl's reward loop runs it: every dataset's reference answer scores 1 there too
(tests/unit/reward/test_score_contexts.py checks the other contexts: threads, daemonic processes), and its time
limit cuts an overrun off and its workers die with the actor."""

from __future__ import annotations

import operator
import os
import time

import pytest

from rg_verl.reward.time_limit import call_bounded
from tests.unit.reward.test_score_contexts import accuracies, cases
from tests.unit.reward.test_time_limit import gone

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ray():
    """One local Ray instance for the module's actors."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def test_a_ray_actor_scores_every_reference_answer_1(ray):
    @ray.remote
    class Scorer:
        def score(self, batch):
            return accuracies(batch)

    # only a hang: beside three busy processes at nice 0, this nice-15 actor's test took 350 s
    found = ray.get(Scorer.remote().score.remote(cases()), timeout=1800)
    assert found == [1.0] * len(cases())


def bounded_calls() -> tuple:
    """An answer, an overrun, and a worker's pid, from call_bounded in this process."""
    return (
        tuple(call_bounded(operator.add, 1, 2, timeout=600)),
        tuple(call_bounded(time.sleep, 600, timeout=0.5)),
        call_bounded(os.getpid, timeout=600).value,
    )


def test_a_ray_actors_time_limit_cuts_off_an_overrun_and_its_workers_die_with_it(ray):
    @ray.remote
    class Bounded:
        def calls(self):
            return bounded_calls()

    actor = Bounded.remote()
    answer, overrun, worker = ray.get(actor.calls.remote(), timeout=1800)
    ray.kill(actor)
    assert answer == (3, "ok") and overrun == (None, "timeout")
    assert gone(worker, limit_s=60.0, zombie_ok=True), f"worker {worker} outlived its Ray actor"
