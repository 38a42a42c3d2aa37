"""A Ray worker that died, found through Ray's state API and named, so a run stops with the reason."""

from __future__ import annotations

import logging
import re
import signal
from dataclasses import dataclass

__all__ = [
    "DeadActor", "WorkerDiedError", "dead_actors", "dead_engines", "engine_death", "engine_error", "exit_text",
    "from_error", "is_rollout_server", "raise_if_a_worker_died", "server_label",
]  # fmt: skip

logger = logging.getLogger(__name__)

STATE_TIMEOUT_S = 10
# Ray's words for an actor that ended on purpose (ray.actor.exit_actor(), ray.kill() by its owner)
_INTENDED = ("INTENDED_USER_EXIT", "INTENDED_SYSTEM_EXIT", "ray.kill")


class WorkerDiedError(RuntimeError):
    """A Ray actor of the run died; the one-line message names it, and the driver ends the run on it."""


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


def from_error(name: str, error: Exception) -> DeadActor:
    """A dead actor as Ray's ``ActorDiedError`` describes it, where the state API has no account of it."""
    fields, cause = {}, []
    for line in str(error).splitlines():
        key, sep, value = line.strip().partition(": ")
        if line.startswith("\t") and sep:
            fields[key] = value.strip()
        elif line.strip() and not line.startswith("\t") and fields:
            cause.append(line.strip())
    text = " ".join(cause).split(" Some common causes include:", 1)[0] or "no cause recorded"
    pid = fields.get("pid", "")
    return DeadActor(fields.get("class_name", "actor"), name, int(pid) if pid.isdigit() else None,
                     fields.get("ip", ""), text)  # fmt: skip


def dead_actors() -> list[DeadActor]:
    """The actors of this run's Ray job that died other than by request; [] where the state API cannot answer."""
    import ray
    from ray.util.state import list_actors

    if not ray.is_initialized():
        return []
    context = ray.get_runtime_context()
    try:
        # this cluster's address (Ray refuses to guess among several); this job's actors (earlier runs' share names)
        states = list_actors(
            address=context.gcs_address, filters=[("state", "=", "DEAD"), ("job_id", "=", context.get_job_id())],
            detail=True, timeout=STATE_TIMEOUT_S, raise_on_missing_output=False,
        )  # fmt: skip
    except Exception as error:  # noqa: BLE001 - a missing dashboard must not stop the run on its own
        logger.warning("could not ask Ray which actors died (%s); the refill bound still ends the step", error)
        return []
    found = [_from_state(actor) for actor in states]
    return [actor for actor in found if not any(word in actor.cause for word in _INTENDED)]


# the Ray names of rollout servers: verl's (vllm_server_<replica>_<node>, sglang_..., reward and teacher models')
# and the hf rollout's (rg_verl_hf_server_<replica>, rg_verl/hf_rollout/replica.py)
SERVER_NAME = re.compile(r"(^|_)server_((reward|teacher)_)?(?=\d)")


def is_rollout_server(name: str) -> bool:
    """Whether the Ray actor ``name`` is a rollout server of verl's or of rg-verl's."""
    return bool(SERVER_NAME.search(name))


def server_label(name: str) -> str:
    """``rollout replica 0 (Ray actor 'vllm_server_0_0')``: a server's replica, read off its Ray name."""
    match = SERVER_NAME.search(name)
    replica = name[match.end() :].split("_")[0] if match else ""
    return f"rollout replica {replica} (Ray actor {name!r})" if replica.isdigit() else f"the Ray actor {name!r}"


def exit_text(code: int | None) -> str:
    """A process's exit code in words: ``killed by SIGKILL``, ``exited with code 1``."""
    if code is None:
        return "ended"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


def engine_error(server) -> str | None:
    """Inside a rollout server actor: None while its vLLM engine runs (or none yet), else what vLLM says of it."""
    engine = getattr(server, "engine", None)
    if engine is None or not getattr(engine, "errored", False):
        return None
    text = type(engine.dead_error).__name__  # vLLM's message only points at its log
    # vLLM's record of its engine core processes (vllm/v1/engine/utils.py, CoreEngineProcManager.finished_procs)
    manager = getattr(getattr(getattr(engine, "engine_core", None), "resources", None), "engine_manager", None)
    try:
        finished = manager.finished_procs() if manager is not None else {}
    except Exception:  # noqa: BLE001 - the exit codes only add detail to a death already found
        finished = {}
    exits = [f"{name} {exit_text(code)}" for name, code in finished.items()]
    return f"{text} ({'; '.join(exits)}; vLLM's log above has its traceback, if it had one)" if exits else text


def engine_death(name: str, error: str) -> str:
    """The death of the engine of the rollout server ``name`` in words, from :func:`engine_error`'s answer."""
    return f"the vLLM engine of {server_label(name)} died: {error}"


def dead_engines(timeout_s: float = STATE_TIMEOUT_S) -> list[str]:
    """The rollout servers whose vLLM engine died, in words; one not answering within ``timeout_s`` is left out."""
    import ray

    if not ray.is_initialized():
        return []
    dead = []
    for name in filter(is_rollout_server, ray.util.list_named_actors()):
        try:
            error = ray.get(ray.get_actor(name).__ray_call__.remote(engine_error), timeout=timeout_s)
        except Exception:  # noqa: BLE001 - dead, gone or busy: not an engine's death to report here
            continue
        if error is not None:
            dead.append(engine_death(name, error))
    return dead


def raise_if_a_worker_died(what: str) -> None:
    """Raise :class:`WorkerDiedError` naming every actor and engine of the run that died; logs ``what`` failed."""
    dead = [actor.describe() for actor in dead_actors()] + dead_engines()
    if dead:
        logger.error("%s, and a worker of this run is dead", what)
        raise WorkerDiedError("; ".join(dead))
