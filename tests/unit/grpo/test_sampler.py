"""rg_verl.grpo.sampler: complete groups and bounded refills on top of verl's replay buffer."""

import pytest
import transfer_queue as tq
from hydra import compose, initialize_config_dir
from hypothesis import given
from hypothesis import strategies as st
from verl.trainer.ppo.v1.replay_buffer import DAPO_FILTERED_REWARD_COUNTS_KEY, ReplayBufferAsync

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


def test_the_buffer_filters_on_the_metric_of_filter_groups_and_verl_s_own_filter_stays_off():
    assert buffer([]).filter_metric is None
    assert buffer([], {"enable": False, "metric": "accuracy"}).filter_metric is None
    on = buffer([], {"enable": True, "metric": "accuracy"})
    assert on.filter_metric == "accuracy" and on.filter_groups_metric is None
    with pytest.raises(ValueError, match="needs refill_fn"):
        CompleteGroupsBuffer(
            trainer_mode="rg_verl", trainer_config={}, max_off_policy_threshold=None, max_off_policy_strategy="drop",
            sampler_kwargs={"rollout_n": 2, "train_batch_size": 2, "max_refill_batches": 1,
                            "filter_groups": {"enable": True, "metric": "accuracy"}},
        )  # fmt: skip


FILTER = {"enable": True, "metric": "accuracy"}


def keys_of(outcomes: dict[str, list[float]]) -> list[str]:
    return [f"{uid}_{s}_0" for uid, values in outcomes.items() for s in range(len(values))]


@pytest.fixture
def rounds(monkeypatch):
    """verl's sample() returns one round of groups per call, ``{uid: [accuracy per response]}``; returns
    (the rounds to fill, the sizes asked for, the keys cleared from the store)."""
    from rg_verl.grpo import sampler as module

    planned: list[dict[str, list[float]]] = []
    asked: list[int] = []
    cleared: list[list[str]] = []
    accuracy: dict[str, float] = {}

    def sample(self, global_steps, partition_id, batch_size):
        asked.append(batch_size)
        outcomes = planned.pop(0)
        for uid, values in outcomes.items():
            accuracy.update({f"{uid}_{s}_0": v for s, v in enumerate(values)})
        keys = keys_of(outcomes)
        return tq.KVBatchMeta(keys=keys, tags=[{"k": k} for k in keys]), {"training/rollout_failure/evicted_samples": 1}

    def read(keys, partition_id):
        return list(keys), [f"rg/{k[0]}" for k in keys], [{"accuracy": accuracy[k], "score": 0.5} for k in keys]

    monkeypatch.setattr(ReplayBufferAsync, "sample", sample)
    monkeypatch.setattr(module, "read_rewards", read)
    monkeypatch.setattr(tq, "kv_clear", lambda keys, partition_id: cleared.append(list(keys)))
    return planned, asked, cleared


def test_filtering_drops_dead_groups_refills_them_and_keeps_their_outcomes(rounds):
    planned, asked, cleared = rounds
    planned += [{"a": [1, 0], "b": [1, 1]}, {"c": [0, 0]}, {"d": [0, 1]}]
    refills: list[int] = []
    sampler = buffer(refills, FILTER, n=2)
    batch, metrics = sampler.sample(1, "train", 2)
    assert batch.keys == ["a_0_0", "a_1_0", "d_0_0", "d_1_0"] and batch.tags == [{"k": k} for k in batch.keys]
    assert asked == [2, 1, 1] and refills == [1, 1]
    assert cleared == [["b_0_0", "b_1_0"], ["c_0_0", "c_1_0"]]
    assert metrics == {
        "training/rollout_failure/evicted_samples": 3,  # verl's counts add up over the rounds
        "training/filter_groups/evicted_samples": 2,
        DAPO_FILTERED_REWARD_COUNTS_KEY: {1.0: 1, 0.0: 1},
    }
    groups = sampler.take_groups()
    assert [(g.uid, g.data_source, g.accuracies, g.trained) for g in groups] == [
        ("a", "rg/a", [1.0, 0.0], True),
        ("b", "rg/b", [1.0, 1.0], False),
        ("c", "rg/c", [0.0, 0.0], False),
        ("d", "rg/d", [0.0, 1.0], True),
    ]
    assert sampler.take_groups() == []


def test_without_filtering_every_group_is_trained_and_kept_for_the_trainer(rounds):
    planned, asked, cleared = rounds
    planned.append({"a": [1, 1], "b": [0, 0]})
    sampler = buffer([], None, n=2)
    batch, _ = sampler.sample(1, "train", 2)
    assert len(batch.keys) == 4 and asked == [2] and cleared == []
    assert [g.trained for g in sampler.take_groups()] == [True, True]


def test_a_group_of_one_response_is_never_dropped(rounds):
    planned, _, cleared = rounds
    planned.append({"a": [1], "b": [0]})
    batch, _ = buffer([], FILTER, n=1).sample(1, "train", 2)
    assert len(batch.keys) == 2 and cleared == []


def test_a_filter_that_never_finds_a_live_group_stops_at_the_refill_bound(rounds):
    planned, _, _ = rounds
    planned += [{"a": [1, 1], "b": [1, 1]}, {"c": [0, 0], "d": [1, 1]}]  # at most 1 x 2 refills
    with pytest.raises(RuntimeError, match="finds no group with both right and wrong answers"):
        buffer([], FILTER, n=2, batch=2, max_batches=1).sample(1, "train", 2)


def test_a_reward_without_the_filter_metric_is_named(rounds, monkeypatch):
    from rg_verl.grpo import sampler as module

    planned, _, _ = rounds
    planned.append({"a": [1, 0], "b": [1, 1]})
    monkeypatch.setattr(module, "read_rewards", lambda keys, p: (list(keys), ["s"] * len(keys), [{}] * len(keys)))
    with pytest.raises(RuntimeError, match=r"has no 'accuracy', the metric that algorithm.filter_groups.metric"):
        buffer([], FILTER, n=2).sample(1, "train", 2)


def _sampled(monkeypatch, keys):
    """A buffer whose verl sample() returns ``keys``; the bound on refills restarts with each step."""
    from rg_verl.grpo import sampler as module

    monkeypatch.setattr(
        ReplayBufferAsync, "sample", lambda self, *a: (tq.KVBatchMeta(keys=keys, tags=[{}] * len(keys)), {"m": 1})
    )
    monkeypatch.setattr(module, "read_rewards", lambda keys, p: (list(keys), ["s"] * len(keys), [{}] * len(keys)))
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
    assert (built.rollout_n, built.max_refills, built.filter_metric) == (2, 40, "accuracy")


def test_a_failed_group_with_a_dead_worker_stops_the_step_before_any_refill(monkeypatch):
    from rg_verl.grpo import workers

    refills: list[int] = []
    sampler = buffer(refills)
    dead = workers.DeadActor("HFRolloutServer", "rg_verl_hf_server_0", 11, "10.0.0.7", "killed")
    monkeypatch.setattr(workers, "dead_actors", lambda: [dead])
    with pytest.raises(workers.WorkerDiedError, match="the Ray actor HFRolloutServer 'rg_verl_hf_server_0'"):
        sampler.refill_fn(1)  # verl's call for a failed group
    assert refills == [] and sampler.refilled == 0


def test_a_failed_group_without_a_dead_worker_is_replaced(monkeypatch):
    from rg_verl.grpo import workers

    refills: list[int] = []
    sampler = buffer(refills)
    monkeypatch.setattr(workers, "dead_actors", lambda: [])
    sampler.refill_fn(2)
    assert refills == [2] and sampler.refilled == 2
