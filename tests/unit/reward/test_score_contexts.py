"""The reward gives reasoning-gym's score in every process where verl or a user may call it.

Every dataset's reference answers (the oracle test's items, which it scores in the main thread), and the
answers of ``intermediate_integration`` that are unevaluated integrals (``3*Integral(x**3*cos(3*x), x) + C``,
about 9% of its items), are scored in another thread, in a daemonic ``multiprocessing.Pool`` worker (as in a data-loader
worker) and in a Ray actor. Each must score 1, as reasoning-gym's own scorer does. The sympy-parsing scorers
run in bounded worker processes (``rg_verl.reward.time_limit``), which multiprocessing refuses a daemonic process
until it clears its ``daemon`` flag.
"""

from __future__ import annotations

import functools
import multiprocessing
import threading

import reasoning_gym
from reasoning_gym.factory import DATASETS, get_score_answer_fn

from rg_verl.reward import compute_score
from rg_verl.reward.sympy_guard import SYMPY_PARSED
from tests.helpers import unhurried_scoring
from tests.unit.reward.test_oracle import CONSTRUCTED, SKIPPED, items

Case = tuple[str, str, dict]  # data source, answer, extra_info


def integral_answers(count: int = 2) -> list[Case]:
    """``count`` intermediate_integration entries whose reference answer holds an unevaluated ``Integral``."""
    dataset = reasoning_gym.create_dataset("intermediate_integration", seed=1, size=40)
    entries = [entry for entry in dataset if "Integral(" in entry["answer"]][:count]
    assert len(entries) == count
    return [("reasoning_gym/intermediate_integration", e["answer"], {"entry": e}) for e in entries]


@functools.cache
def cases() -> list[Case]:
    out = integral_answers()
    for name in sorted(set(DATASETS) - set(CONSTRUCTED) - set(SKIPPED)):
        for item in items(name):
            out.append((item["data_source"], item["extra_info"]["entry"]["answer"], item["extra_info"]))
    return out


def accuracies(batch: list[Case]) -> list[float]:
    """The reward's accuracy of each case's answer in a well-formatted response (module level: picklable), with no
    per-answer limit a loaded machine could hit (a Ray actor's workers run at nice 15)."""
    with unhurried_scoring():
        return [
            compute_score(source, f"<think>x</think><answer>{answer}</answer>", answer, info)["accuracy"]
            for source, answer, info in batch
        ]


def test_the_cases_cover_every_dataset_and_reasoning_gym_scores_them_1():
    names = {source.split("/", 1)[1] for source, _, _ in cases()}
    assert names == set(DATASETS) - set(CONSTRUCTED) - set(SKIPPED) and SYMPY_PARSED <= names
    for source, answer, info in integral_answers():
        assert get_score_answer_fn(source.split("/", 1)[1])(answer, info["entry"]) == 1.0


def test_another_thread_scores_every_reference_answer_1():
    # the main thread: tests/unit/reward/test_oracle.py
    found: list[float] = []
    thread = threading.Thread(target=lambda: found.extend(accuracies(cases())))
    thread.start()
    thread.join(timeout=600)
    assert found == [1.0] * len(cases())


def test_a_daemonic_worker_scores_every_reference_answer_1():
    """A ``multiprocessing.Pool`` worker is daemonic: multiprocessing refuses it children, and the sympy scorers
    need a bounded worker process of their own."""
    with multiprocessing.get_context("fork").Pool(1) as pool:
        daemonic = pool.apply(_is_daemonic)
        found = pool.apply(accuracies, (cases(),))
    assert daemonic
    assert found == [1.0] * len(cases())


def _is_daemonic() -> bool:
    return multiprocessing.current_process().daemon
