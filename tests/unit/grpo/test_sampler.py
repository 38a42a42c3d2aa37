"""rg_verl.grpo.sampler: complete groups and bounded refills on top of verl's replay buffer."""

import pytest
import transfer_queue as tq
from hydra import compose, initialize_config_dir
from hypothesis import given
from hypothesis import strategies as st
from verl.trainer.ppo.v1.replay_buffer import ReplayBufferAsync

from rg_verl.grpo.sampler import CompleteGroupsBuffer, sessions_per_group
from tests.helpers import REPO


def buffer(refills: list[int], filter_groups=None, n=4, batch=2, max_batches=3) -> CompleteGroupsBuffer:
    kwargs = {"rollout_n": n, "train_batch_size": batch, "max_refill_batches": max_batches,
              "filter_groups": filter_groups}  # fmt: skip
    return CompleteGroupsBuffer(
        trainer_mode="rg_verl", trainer_config={}, max_off_policy_threshold=None, max_off_policy_strategy="drop",
        sampler_kwargs=kwargs, refill_fn=refills.append,
    )  # fmt: skip


@given(sessions=st.dictionaries(st.sampled_from("abcdef"), st.sets(st.integers(0, 5), min_size=1), min_size=1),
       outputs=st.integers(1, 3))  # fmt: skip
def test_groups_count_sessions_not_outputs(sessions, outputs):
    keys = [f"uid{u}_{s}_{i}" for u, found in sessions.items() for s in found for i in range(outputs)]
    assert sessions_per_group(keys) == {f"uid{u}": len(found) for u, found in sessions.items()}


def test_refills_pass_through_until_the_bound_then_stop_the_step():
    refills: list[int] = []
    sampler = buffer(refills)  # at most 3 x 2 prompts per step
    sampler.refill(4)
    sampler.refill(2)
    assert refills == [4, 2]
    with pytest.raises(RuntimeError, match=r"replaced 7 prompt groups, more than .* = 6: either rollouts keep failing"):
        sampler.refill(1)
    assert refills == [4, 2]  # the prompt over the bound is not asked for


def test_verl_filters_on_the_metric_of_filter_groups_when_it_is_on():
    assert buffer([]).filter_groups_metric is None
    assert buffer([], {"enable": False, "metric": "accuracy"}).filter_groups_metric is None
    assert buffer([], {"enable": True, "metric": "accuracy"}).filter_groups_metric == "accuracy"


def _sampled(monkeypatch, keys):
    """A buffer whose verl sample() returns ``keys``; the bound on refills restarts with each step."""
    monkeypatch.setattr(
        ReplayBufferAsync, "sample", lambda self, *a: (tq.KVBatchMeta(keys=keys, tags=[{}] * len(keys)), {"m": 1})
    )
    sampler = buffer([])
    sampler.refill(5)
    return sampler


def test_a_complete_batch_passes_and_a_step_starts_a_fresh_refill_count(monkeypatch):
    keys = [f"{uid}_{s}_0" for uid in ("a", "b") for s in range(4)]
    sampler = _sampled(monkeypatch, keys)
    batch, metrics = sampler.sample(1, "train", 2)
    assert batch.keys == keys and metrics == {"m": 1} and sampler.refilled == 0


@pytest.mark.parametrize(
    "keys, message",
    [
        ([f"a_{s}_0" for s in range(4)] + [f"b_{s}_0" for s in range(3)], r"holds 2 of 2 .* \{'b': 3\}"),
        ([f"a_{s}_0" for s in range(4)], r"holds 1 of 2 prompt groups"),
    ],
)
def test_a_short_group_or_a_missing_one_stops_the_step(monkeypatch, keys, message):
    with pytest.raises(RuntimeError, match=message):
        _sampled(monkeypatch, keys).sample(3, "train", 2)
    # validation keeps verl's behaviour: it scores what came back
    assert _sampled(monkeypatch, keys).sample(3, "val", 2)[0].keys == keys


def test_the_base_config_plugs_the_buffer_in_through_verl_s_custom_sampler():
    from verl.utils.import_utils import load_extern_object

    with initialize_config_dir(config_dir=str(REPO / "configs" / "smoke"), version_base=None):
        config = compose(config_name="cpu", overrides=["algorithm.filter_groups.enable=true",
                                                       "algorithm.filter_groups.metric=accuracy"])  # fmt: skip
    sampler = config.trainer.v1.sampler
    assert load_extern_object(sampler.custom_sampler.path, sampler.custom_sampler.name) is CompleteGroupsBuffer
    built = CompleteGroupsBuffer(
        trainer_mode="rg_verl", trainer_config={}, max_off_policy_threshold=8, max_off_policy_strategy="drop",
        sampler_kwargs=sampler.sampler_kwargs, refill_fn=print,
    )  # fmt: skip
    assert (built.rollout_n, built.max_refills, built.filter_groups_metric) == (2, 40, "accuracy")
