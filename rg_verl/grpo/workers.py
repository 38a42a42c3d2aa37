"""A Ray worker that died: found and named, so a run stops with the reason instead of retrying in vain.

When a rollout server's process dies, every request to it fails, and verl replaces each prompt group with a failed
request (:mod:`rg_verl.grpo.sampler`). The replay buffer asks here, at the first failed group, which actors of the
run died other than by request (Ray's state API: class, Ray name, pid, node, Ray's account of the death), and stops
the step naming them. :mod:`rg_verl.grpo.watchdog` asks too, for a server that stopped answering. Where the state
API cannot be reached (a cluster without the dashboard), the answer is "none found".
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

__all__ = ["DeadActor", "WorkerDiedError", "dead_actors", "raise_if_a_worker_died"]

logger = logging.getLogger(__name__)

STATE_TIMEOUT_S = 10
# Ray's words for an actor that ended on purpose (ray.actor.exit_actor(), ray.kill() by its owner)
_INTENDED = ("INTENDED_USER_EXIT", "INTENDED_SYSTEM_EXIT", "ray.kill")


class WorkerDiedError(RuntimeError):
    """A Ray actor of the run died; the message (one line) names it. The driver ends the run on it
    (:mod:`rg_verl.grpo.stopping`), saying how to resume."""


@dataclass(frozen=True)
class DeadActor:
    """What Ray's state API says of an actor that died."""

    class_name: str
    name: str
    pid: int | None
    node_ip: str
    cause: str

    def describe(self) -> str:
        label = f"{self.class_name} {self.name!r}" if self.name else self.class_name
        return f"the Ray actor {label} (pid {self.pid}, node {self.node_ip or 'unknown'}) died: {self.cause}"


def _from_state(actor) -> DeadActor:
    context = (getattr(actor, "death_cause", None) or {}).get("actor_died_error_context", {}) or {}
    message = str(context.get("error_message") or "no cause recorded")
    reason = context.get("reason")
    cause = message.split(" Some common causes include:", 1)[0]  # Ray's generic advice follows
    if reason and reason != "WORKER_DIED":
        cause = f"{reason}: {cause}"
    return DeadActor(
        class_name=str(actor.class_name or "actor"),
        name=str(actor.name or ""),
        pid=actor.pid,
        node_ip=str(context.get("node_ip_address") or ""),
        cause=cause,
    )


def dead_actors() -> list[DeadActor]:
    """The actors of this Ray cluster that died other than by request; [] where the state API cannot answer."""
    import ray
    from ray.util.state import list_actors

    if not ray.is_initialized():
        return []
    try:
        # the address of this process's own cluster: on a machine that runs several, Ray would refuse to guess
        states = list_actors(
            address=ray.get_runtime_context().gcs_address, filters=[("state", "=", "DEAD")], detail=True,
            timeout=STATE_TIMEOUT_S, raise_on_missing_output=False,
        )  # fmt: skip
    except Exception as error:  # noqa: BLE001 - a missing dashboard must not stop the run on its own
        logger.warning("could not ask Ray which actors died (%s); the refill bound still ends the step", error)
        return []
    found = [_from_state(actor) for actor in states]
    return [actor for actor in found if not any(word in actor.cause for word in _INTENDED)]


def raise_if_a_worker_died(what: str) -> None:
    """Raise :class:`WorkerDiedError` naming every actor of the run that died; ``what`` says what failed."""
    dead = dead_actors()
    if not dead:
        return
    raise WorkerDiedError(f"{what}, and a Ray worker of this run is dead: {'; '.join(a.describe() for a in dead)}")
