"""OREO's value-guided search over stub expanders and values: what it keeps, how it batches, what it refuses."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rg_verl.search.beam import Beam, value_beam, value_rerank

MARK = 1  # the token the stub value prefers


def marker_value(requests):
    """The stub value: how many marker tokens a state holds."""
    return [float(ids.count(MARK)) for _, ids in requests]


class TokenExpander:
    """Continuation j of any state is the one token j; a state of ``length`` tokens is finished. Logs its calls."""

    def __init__(self, length=3):
        self.length, self.calls = length, []

    def __call__(self, requests, k):
        self.calls.append((list(requests), k))
        return [[((j,), len(ids) + 1 >= self.length) for j in range(k)] for _, ids in requests]


def test_value_beam_keeps_what_the_value_prefers():
    expand = TokenExpander(length=3)
    [answers] = value_beam(["p"], expand, marker_value, beam_width=2, max_steps=5, n_answers=2)
    # step 1 keeps (1,), (0,); step 2 keeps (1, 1), (1, 0); step 3 finishes six: the best is all markers and the
    # runner-up is the first of the value-2 ones made
    assert answers == [Beam((1, 1, 1), True, 3.0), Beam((1, 1, 0), True, 2.0)]
    assert [len(requests) for requests, _ in expand.calls] == [1, 2, 2]
    assert [requests for requests, _ in expand.calls][2] == [(0, (1, 1)), (0, (1, 0))]
    assert {k for _, k in expand.calls} == {2}


def test_every_step_is_one_call_for_all_prompts():
    expand = TokenExpander(length=2)
    values = []

    def value(requests):
        values.append(list(requests))
        return marker_value(requests)

    out = value_beam(["a", "b", "c"], expand, value, beam_width=2, max_steps=4, n_answers=1)
    assert len(expand.calls) == len(values) == 2  # everything is finished after two steps
    assert sorted({p for p, _ in expand.calls[1][0]}) == [0, 1, 2]
    assert len(values[1]) == 3 * 2 * 2  # three prompts, two beams, two continuations
    assert out == [[Beam((1, 1), True, 2.0)]] * 3


def test_one_beam_one_step_is_the_first_sample():
    def expand(requests, k):
        assert k == 1
        return [[((7, 8), False)] for _ in requests]

    out = value_beam([0, 1], expand, marker_value, beam_width=1, max_steps=1, n_answers=1)
    assert out == [[Beam((7, 8), False, 0.0)], [Beam((7, 8), False, 0.0)]]


def test_finished_answers_come_first_then_the_best_live_beams():
    def expand(requests, k):  # from the empty state: one finished answer, the rest live
        return [[((j,), j == 0) for j in range(k)] for _ in requests]

    [answers] = value_beam(["p"], expand, marker_value, beam_width=3, max_steps=1, n_answers=3)
    assert answers == [Beam((0,), True, 0.0), Beam((1,), False, 1.0), Beam((2,), False, 0.0)]


def test_a_prompt_gets_fewer_answers_only_when_nothing_is_left():
    [answers] = value_beam(["p"], TokenExpander(length=1), marker_value, beam_width=2, max_steps=3, n_answers=5)
    assert answers == [Beam((1,), True, 1.0), Beam((0,), True, 0.0)]


def tied_value(requests):
    """A stub value with many ties: a fixed pseudo-random number in 0..4 per token sequence."""
    return [float(sum((i + 1) * (t + 3) for i, t in enumerate(ids)) % 5) for _, ids in requests]


@settings(max_examples=60, deadline=None)
@given(width=st.integers(1, 4), depth=st.integers(1, 2), n=st.integers(1, 18))
def test_without_pruning_the_answers_are_the_best_leaves_in_stable_order(width, depth, n):
    """Up to two steps nothing is pruned (step one makes exactly ``width`` beams), so the answers are the best
    ``n`` of all ``width ** depth`` leaves, ties in the order they were made (beams best first, then their
    continuations in order)."""
    [answers] = value_beam(["p"], TokenExpander(depth), tied_value, beam_width=width, max_steps=depth, n_answers=n)

    def best_first(states):
        return sorted(states, key=lambda ids: -tied_value([(0, ids)])[0])

    leaves = [(j,) for j in range(width)]
    if depth == 2:  # made from the step-one beams, best first
        leaves = [beam + (j,) for beam in best_first(leaves) for j in range(width)]
    expected = best_first(leaves)[:n]
    assert [a.ids for a in answers] == expected
    assert all(a.finished for a in answers)
    assert [a.value for a in answers] == [tied_value([(0, ids)])[0] for ids in expected]


def test_value_rerank_picks_the_favourites():
    samples = [(5, 5), (1, 5), (1, 1), (5, 1)]

    def sample(requests, k):
        assert all(ids == () for _, ids in requests) and k == 4
        return [[(s, True) for s in samples] for _ in requests]

    out = value_rerank(["p", "q"], sample, marker_value, k=4, n_answers=2)
    assert out == [[Beam((1, 1), True, 2.0), Beam((1, 5), True, 1.0)]] * 2


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"beam_width": 0, "max_steps": 1, "n_answers": 1}, "beam_width"),
        ({"beam_width": 1, "max_steps": 0, "n_answers": 1}, "max_steps"),
        ({"beam_width": 1, "max_steps": 1, "n_answers": 0}, "n_answers"),
        ({"beam_width": 1.5, "max_steps": 1, "n_answers": 1}, "beam_width"),
    ],
)
def test_value_beam_argument_errors(kwargs, name):
    with pytest.raises(ValueError, match=name):
        value_beam(["p"], TokenExpander(), marker_value, **kwargs)


def test_value_rerank_argument_errors():
    with pytest.raises(ValueError, match="k:"):
        value_rerank(["p"], TokenExpander(), marker_value, k=0, n_answers=1)
    with pytest.raises(ValueError, match="n_answers"):
        value_rerank(["p"], TokenExpander(), marker_value, k=1, n_answers=-1)


def test_callables_that_answer_the_wrong_shape_are_named():
    with pytest.raises(ValueError, match="expand: answered 0 lists for 1 requests"):
        value_beam(["p"], lambda requests, k: [], marker_value, beam_width=1, max_steps=1, n_answers=1)
    with pytest.raises(ValueError, match="expand: answered 1 continuations"):
        value_beam(["p"], lambda r, k: [[((1,), True)]], marker_value, beam_width=2, max_steps=1, n_answers=1)
    with pytest.raises(ValueError, match="value: answered 1 numbers for 2 states"):
        value_beam(["p"], TokenExpander(), lambda r: [0.0], beam_width=2, max_steps=1, n_answers=1)
    with pytest.raises(ValueError, match="value: NaN"):
        value_beam(["p"], TokenExpander(), lambda r: [float("nan")] * len(r), beam_width=1, max_steps=1, n_answers=1)
