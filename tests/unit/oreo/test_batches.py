"""Trajectories as engine batches: step boundaries, the rows, the epoch plan, the per-rank chunks."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rg_verl.oreo.batches import BatchPlan, chunks, engine_batch, step_starts, unbind_responses
from rg_verl.oreo.trajectories import Trajectory


class CharTokenizer:
    """Each id is one character: decode([i]) == chr(i)."""

    def decode(self, ids):
        return "".join(chr(i) for i in ids)


def ids(text: str) -> list[int]:
    return [ord(c) for c in text]


def trajectory(prompt: list[int], response: list[int], reward: float = 1.0, index: int = 0) -> Trajectory:
    return Trajectory(
        uid=f"train/{index}",
        split="train",
        index=index,
        sample_idx=0,
        data_source="reasoning_gym/x",
        prompt_ids=tuple(prompt),
        response_ids=tuple(response),
        reward=reward,
        accuracy=reward,
        finished=True,
    )


def test_step_starts_after_each_delimiter_token():
    starts = step_starts(ids("ab\ncd\ne"), CharTokenizer(), ["\n"])
    assert starts == [1, 0, 0, 1, 0, 0, 1]


def test_step_starts_with_several_delimiters_and_token_level():
    assert step_starts(ids("a. b\nc"), CharTokenizer(), [". ", "\n"]) == [1, 0, 0, 0, 0, 1]  # ". " is two tokens here
    assert step_starts(ids("a.x b"), CharTokenizer(), ["."]) == [1, 0, 1, 0, 0]
    assert step_starts(ids("abc"), CharTokenizer(), None) == [1, 1, 1]


@given(st.text(alphabet="ab\n", min_size=1, max_size=30))
def test_steps_partition_the_response(text):
    starts = step_starts(ids(text), CharTokenizer(), ["\n"])
    assert starts[0] == 1 and len(starts) == len(text)
    # a step starts exactly after each newline but the last character
    assert [i for i, s in enumerate(starts) if s][1:] == [i + 1 for i, c in enumerate(text[:-1]) if c == "\n"]


def test_engine_batch_rows_and_masks():
    items = [trajectory([5, 6, 7], [8, 9], reward=1.0), trajectory([5], [3, 4, 2], reward=0.0, index=1)]
    starts = [[1.0, 1.0], [1.0, 0.0, 1.0]]
    batch = engine_batch(items, starts, {"ref_log_prob": [torch.zeros(2), torch.ones(3)]}, global_batch_size=2)
    assert batch["input_ids"].unbind()[0].tolist() == [5, 6, 7, 8, 9]
    assert batch["loss_mask"].unbind()[1].tolist() == [0, 1, 1, 1]
    assert batch["position_ids"].unbind()[1].tolist() == [0, 1, 2, 3]
    assert batch["returns"].unbind()[0].tolist() == [1.0, 1.0]
    assert batch["returns"].unbind()[1].tolist() == [0.0, 0.0, 0.0]
    assert batch["step_start"].unbind()[1].tolist() == [1.0, 0.0, 1.0]
    assert batch["responses"].unbind()[1].tolist() == [3, 4, 2]
    assert batch["ref_log_prob"].unbind()[1].tolist() == [1.0, 1.0, 1.0]
    assert batch["global_batch_size"] == 2 and batch["temperature"] == 1.0


def test_unbind_responses_takes_the_positions_before_each_response_token():
    # row output[p] belongs to the state of tokens <= p; response token t sits at prompt_len + t
    rows = [torch.arange(5.0), torch.arange(10.0, 14.0)]  # prompt 3 + response 2; prompt 1 + response 3
    out = unbind_responses(torch.nested.as_nested_tensor(rows, layout=torch.jagged), [2, 3])
    assert out[0].tolist() == [2.0, 3.0]  # positions 2, 3: s_0 = prompt, s_1 = prompt + first response token
    assert out[1].tolist() == [10.0, 11.0, 12.0]


@settings(max_examples=50)
@given(size=st.integers(8, 60), batch=st.sampled_from([2, 4, 8]), ranks=st.sampled_from([1, 2]), seed=st.integers(0, 9))
def test_plan_covers_each_epoch_once_and_splits_ranks(size, batch, ranks, seed):
    plans = [BatchPlan(size, batch, seed, True, rank, ranks) for rank in range(ranks)]
    steps = plans[0].steps_per_epoch
    assert steps == size // batch
    seen = []
    for step in range(steps):
        parts = [plan.step(step)[1] for plan in plans]
        assert all(len(part) == batch // ranks for part in parts)
        seen += [i for part in parts for i in part]
    assert len(seen) == len(set(seen)) == steps * batch  # no trajectory twice in an epoch
    assert plans[0].step(steps)[0] == 1  # the next step starts epoch 1
    assert plans[0].order(1) != plans[0].order(0) or size < 3


def test_plan_is_a_pure_function_of_the_step():
    a, b = BatchPlan(40, 8, 3, True), BatchPlan(40, 8, 3, True)
    assert [a.step(s) for s in range(12)] == [b.step(s) for s in reversed(range(12))][::-1]
    assert BatchPlan(40, 8, 3, False).step(1) == (0, list(range(8, 16)))


def test_plan_refuses_fewer_trajectories_than_one_batch():
    with pytest.raises(ValueError, match="data.train_batch_size"):
        BatchPlan(3, 8, 0, True)


@given(n=st.integers(1, 30), size=st.integers(1, 5), ranks=st.integers(1, 3))
def test_chunks_cover_every_index_with_equal_rounds(n, size, ranks):
    per_rank = [chunks(list(range(n)), size, r, ranks) for r in range(ranks)]
    assert len({len(c) for c in per_rank}) == 1  # every rank runs the same number of forwards
    assert all(len(chunk) == size for c in per_rank for chunk in c)
    assert set(i for c in per_rank for chunk in c for i in chunk) == set(range(n))
