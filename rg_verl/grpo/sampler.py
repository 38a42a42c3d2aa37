"""verl's ``ReplayBufferAsync`` plus group filtering that keeps dropped groups' outcomes, whole groups, bounded
refills (``max_refill_batches``), and dead workers named at the first failed group.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import transfer_queue as tq
from verl.trainer.ppo.v1.replay_buffer import DAPO_FILTERED_REWARD_COUNTS_KEY, ReplayBufferAsync

from rg_verl.grpo.workers import raise_if_a_worker_died

__all__ = ["CompleteGroupsBuffer", "SampledGroup", "group_of", "groups_of", "read_rewards", "sessions_per_group"]

# where verl's agent loop keeps the reward function's returned dict
READ_FIELDS = ["data_source", "extra_fields"]
EVICTED = "training/filter_groups/evicted_samples"  # verl's metric (summed over a step's iterations)


def group_of(key: str) -> tuple[str, str]:
    """A trajectory key's prompt uid and session: verl keys a trajectory ``<prompt uid>_<session>_<output>``.

    >>> group_of("3f2a_1_0")
    ('3f2a', '1')
    """
    uid, session, _ = str(key).rsplit("_", 2)
    return uid, session


def sessions_per_group(keys: Iterable[str]) -> dict[str, int]:
    """Prompt uid -> the sessions (not keys: a session may have several outputs) among ``keys``.

    >>> sessions_per_group(["a_0_0", "a_1_0", "b_0_0", "b_0_1"])
    {'a': 2, 'b': 1}
    """
    sessions: dict[str, set[str]] = defaultdict(set)
    for key in keys:
        uid, session = group_of(key)
        sessions[uid].add(session)
    return {uid: len(found) for uid, found in sessions.items()}


@dataclass
class SampledGroup:
    """One prompt's responses as a step sampled them: their keys, data source and reward dicts."""

    uid: str
    data_source: str
    keys: list[str]
    infos: list[dict]
    trained: bool = True

    def values(self, name: str) -> list[float]:
        """Each response's reward value ``name``; a response whose reward lacks it is an error."""
        missing = [key for key, info in zip(self.keys, self.infos, strict=True) if name not in info]
        if missing:
            raise RuntimeError(
                f"the reward of trajectories {missing[:3]} has no {name!r}, the metric that "
                "algorithm.filter_groups.metric names; rg-verl's reward returns it (accuracy)"
            )
        return [float(info[name]) for info in self.infos]

    @property
    def accuracies(self) -> list[float]:
        """Each response's binary outcome (0.0 where the reward gave none)."""
        return [float(info.get("accuracy", 0.0)) for info in self.infos]


def groups_of(keys: list[str], data_sources: list[str], infos: list[dict]) -> list[SampledGroup]:
    """The samples of a batch grouped by prompt, in the order their groups first appear."""
    groups: dict[str, SampledGroup] = {}
    for key, source, info in zip(keys, data_sources, infos, strict=True):
        uid = group_of(key)[0]
        group = groups.setdefault(uid, SampledGroup(uid, source, [], []))
        group.keys.append(str(key))
        group.infos.append(info)
    return list(groups.values())


def read_rewards(keys: list[str], partition_id: str) -> tuple[list[str], list[str], list[dict]]:
    """Each sample's key, data source and the dict our reward function returned for it, from verl's store."""
    if not keys:
        return [], [], []
    data = tq.kv_batch_get(keys=keys, partition_id=partition_id, select_fields=READ_FIELDS)
    data_sources = [str(source) for source in list(data["data_source"])]
    infos = [dict(extra or {}).get("reward_extra_info", {}) for extra in list(data["extra_fields"])]
    return [str(key) for key in keys], data_sources, infos


def _filter_metric(filter_groups: Mapping[str, Any] | None) -> str | None:
    """The metric groups are filtered on: ``algorithm.filter_groups.metric`` when filtering is on."""
    if not filter_groups or not filter_groups.get("enable", False):
        return None
    return str(filter_groups.get("metric"))


def _add_metrics(total: dict, new: Mapping[str, Any]) -> None:
    # counts (verl's ".../evicted_samples" and the like) add up over a step's rounds; the rest keeps the last
    for key, value in new.items():
        if key == DAPO_FILTERED_REWARD_COUNTS_KEY:
            total[key] = dict(Counter(total.get(key, {})) + Counter(value))
        elif key.endswith("_samples") and isinstance(value, int | float):
            total[key] = total.get(key, 0) + value
        else:
            total[key] = value


class CompleteGroupsBuffer(ReplayBufferAsync):
    """verl's ``ReplayBufferAsync`` with group filtering, complete groups and bounded refills (see the module)."""

    def __init__(self, *, sampler_kwargs: Mapping[str, Any], refill_fn: Callable[[int], Any] | None = None, **kwargs):
        options = dict(sampler_kwargs or {})
        self.rollout_n = int(options["rollout_n"])
        self.max_refills = int(options["max_refill_batches"]) * int(options["train_batch_size"])
        self.filter_metric = _filter_metric(options.get("filter_groups"))
        if self.filter_metric is not None and refill_fn is None:
            raise ValueError("group filtering (algorithm.filter_groups) needs refill_fn to replace dropped groups")
        self.refilled = 0
        self.sampled: list[SampledGroup] = []  # this step's groups, trained and dropped, until take_groups()
        self._refill = refill_fn
        # verl's own filter stays off: it would clear the dropped groups before their outcomes are read
        kwargs.pop("filter_groups_metric", None)
        super().__init__(
            sampler_kwargs=sampler_kwargs, refill_fn=self._replace_failed if refill_fn is not None else None, **kwargs
        )

    def _replace_failed(self, count: int) -> None:
        """verl's call for fresh prompts in place of failed groups: first, a dead worker stops the step."""
        raise_if_a_worker_died(f"{count} prompt group(s) lost a rollout request")
        self.refill(count)

    def refill(self, count: int) -> None:
        """verl's refill, counted against the step's bound."""
        self.refilled += count
        if self.refilled > self.max_refills:
            raise RuntimeError(
                f"this step replaced {self.refilled} prompt groups, more than max_refill_batches x "
                f"data.train_batch_size = {self.max_refills}: either rollouts keep failing (see the rollout "
                "server's errors above and the metric training/rollout_failure/evicted_samples), or "
                "algorithm.filter_groups finds no group with both right and wrong answers (the model answers "
                "every prompt alike; turn filtering off, or raise "
                "trainer.v1.sampler.sampler_kwargs.max_refill_batches)"
            )
        self._refill(count)

    def take_groups(self) -> list[SampledGroup]:
        """The groups sampled since the last call, trained and dropped (the trainer calls it once a step)."""
        groups, self.sampled = self.sampled, []
        return groups

    def sample(self, global_steps: int, partition_id: str, batch_size: int):
        """verl's sample, in rounds until the batch holds ``batch_size`` complete groups that pass the filter."""
        self.refilled = 0
        if partition_id == "val":  # validation keeps verl's behaviour: it scores what came back
            return super().sample(global_steps, partition_id, batch_size)
        keys, tags, metrics = [], [], {}
        needed = batch_size
        while needed:
            batch, round_metrics = super().sample(global_steps, partition_id, needed)
            _add_metrics(metrics, round_metrics)
            self._check_complete(global_steps, batch.keys, needed)
            groups = groups_of(*read_rewards(batch.keys, partition_id))
            dropped = [group for group in groups if self._dead(group)]
            for group in dropped:
                group.trained = False
            self.sampled.extend(groups)
            dropped_keys = {key for group in dropped for key in group.keys}
            for key, tag in zip(batch.keys, batch.tags, strict=True):
                if key not in dropped_keys:
                    keys.append(key)
                    tags.append(tag)
            needed = len(dropped)
            if dropped:
                tq.kv_clear(keys=sorted(dropped_keys), partition_id=partition_id)
                counts = Counter(group.values(self.filter_metric)[0] for group in dropped)
                _add_metrics(metrics, {EVICTED: len(dropped), DAPO_FILTERED_REWARD_COUNTS_KEY: dict(counts)})
                self.refill(needed)
        return tq.KVBatchMeta(partition_id=partition_id, keys=keys, tags=tags), metrics

    def _dead(self, group: SampledGroup) -> bool:
        """Whether the filter drops ``group``: filtering is on and its metric is the same for every response."""
        if self.filter_metric is None:
            return False
        values = group.values(self.filter_metric)
        return len(values) > 1 and len(set(values)) == 1  # as verl's: a group of one is never dropped

    def _check_complete(self, global_steps: int, keys: list[str], batch_size: int) -> None:
        groups = sessions_per_group(keys)
        short = {uid: count for uid, count in groups.items() if count < self.rollout_n}
        if short or len(groups) != batch_size:
            raise RuntimeError(
                f"step {global_steps}: the sampled batch holds {len(groups)} of {batch_size} prompt groups, and "
                f"groups short of actor_rollout_ref.rollout.n={self.rollout_n} responses "
                f"(uid: responses): {dict(list(short.items())[:5])}; a short group would be trained with a "
                "wrong group mean, so the step stops"
            )
