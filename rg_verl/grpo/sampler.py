"""The replay buffer of rg-verl's trainer: verl's, plus two promises about the groups a step trains.

rg-verl's trainer mode (``trainer.v1.trainer_mode=rg_verl``) gets verl's ``ReplayBufferAsync``. When a rollout
request fails, verl tags its whole prompt group as failed, evicts it and asks for a fresh prompt in its place;
``algorithm.filter_groups`` evicts and replaces the groups whose responses all scored alike. So a group with a
failed rollout is replaced, never trained short. This buffer, plugged in through verl's public
``trainer.v1.sampler.custom_sampler`` (``rg_verl_base.yaml``), adds two checks:

- **Complete groups.** Every sampled training group holds ``rollout.n`` responses, one per session; a step
  that would train a short group stops with an error instead.
- **Bounded refills.** A step replaces at most ``max_refill_batches`` batches' worth of prompts. Without the
  bound, a rollout server that fails every request, or a filter that finds no group with both outcomes (a
  model that answers everything right), keeps verl asking for prompts forever; with it the step stops and
  says which.

verl gives a custom sampler only the sampler kwargs, so this one reads ``algorithm.filter_groups`` from them
(``filter_groups: ${algorithm.filter_groups}``) and passes verl's filter metric on itself.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from verl.trainer.ppo.v1.replay_buffer import ReplayBufferAsync

__all__ = ["CompleteGroupsBuffer", "sessions_per_group"]


def sessions_per_group(keys: Iterable[str]) -> dict[str, int]:
    """Prompt uid -> the sessions (responses) of its group among ``keys``.

    verl keys a trajectory ``<prompt uid>_<session>_<output index>``; an agent loop with several outputs per
    session gives one session several keys, so sessions are counted, not keys.

    >>> sessions_per_group(["a_0_0", "a_1_0", "b_0_0", "b_0_1"])
    {'a': 2, 'b': 1}
    """
    sessions: dict[str, set[str]] = defaultdict(set)
    for key in keys:
        uid, session, _ = str(key).rsplit("_", 2)
        sessions[uid].add(session)
    return {uid: len(found) for uid, found in sessions.items()}


def _filter_metric(filter_groups: Mapping[str, Any] | None) -> str | None:
    """verl's filter metric for the buffer: ``algorithm.filter_groups.metric`` when filtering is on."""
    if not filter_groups or not filter_groups.get("enable", False):
        return None
    return str(filter_groups.get("metric"))


class CompleteGroupsBuffer(ReplayBufferAsync):
    """verl's ``ReplayBufferAsync`` with complete groups and bounded refills (see the module docstring).

    ``sampler_kwargs``: ``rollout_n`` (responses per group), ``train_batch_size`` (prompts per step),
    ``max_refill_batches`` (a step replaces at most this many times ``train_batch_size`` prompts) and
    ``filter_groups`` (``algorithm.filter_groups``).
    """

    def __init__(self, *, sampler_kwargs: Mapping[str, Any], refill_fn: Callable[[int], Any] | None = None, **kwargs):
        options = dict(sampler_kwargs or {})
        self.rollout_n = int(options["rollout_n"])
        self.max_refills = int(options["max_refill_batches"]) * int(options["train_batch_size"])
        self.refilled = 0
        self._refill = refill_fn
        super().__init__(
            sampler_kwargs=sampler_kwargs,
            refill_fn=self.refill if refill_fn is not None else None,
            filter_groups_metric=_filter_metric(options.get("filter_groups")),
            **kwargs,
        )

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

    def sample(self, global_steps: int, partition_id: str, batch_size: int):
        """verl's sample; a training batch must hold ``batch_size`` complete groups."""
        self.refilled = 0
        batch, metrics = super().sample(global_steps, partition_id, batch_size)
        if partition_id != "val":
            groups = sessions_per_group(batch.keys)
            short = {uid: count for uid, count in groups.items() if count < self.rollout_n}
            if short or len(groups) != batch_size:
                raise RuntimeError(
                    f"step {global_steps}: the sampled batch holds {len(groups)} of {batch_size} prompt groups, and "
                    f"groups short of actor_rollout_ref.rollout.n={self.rollout_n} responses "
                    f"(uid: responses): {dict(list(short.items())[:5])}; a short group would be trained with a "
                    "wrong group mean, so the step stops"
                )
        return batch, metrics
