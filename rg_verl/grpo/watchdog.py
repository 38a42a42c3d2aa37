"""The run's rollout servers, watched from the driver: a dead engine or server ends the run in seconds, by name.

A vLLM replica's engine core is a child process of verl's ``vLLMHttpServer`` actor, which outlives it: vLLM marks
the engine dead (``AsyncLLM.errored``) while verl's weight sender waits for an answer for good (docs/cpu.md, "When
an engine dies"). :class:`EngineWatch` asks each rollout server of the run every few seconds whether it and its
engine still run (:func:`engine_error`, run inside the server through Ray's ``__ray_call__``, as verl's replicas
run code in their workers); the first death it finds is passed to ``on_death``, once.

    with EngineWatch(on_death=stop_the_run) as watch:
        run_ppo(...)
    # watch.death: what died, or None
"""

from __future__ import annotations

import logging
import re
import signal
import threading

from rg_verl.grpo.workers import dead_actors

__all__ = ["EngineWatch", "engine_error", "exit_text", "is_rollout_server", "server_label"]

logger = logging.getLogger(__name__)

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
    """Inside a rollout server actor: None while its engine runs, else what vLLM says of the death.

    verl's ``vLLMHttpServer`` keeps its ``AsyncLLM`` as ``engine`` once launched; an hf server, or a vLLM one still
    starting, has none and answers None (reaching it at all shows it is alive).
    """
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


class EngineWatch:
    """A thread that polls the run's rollout servers every ``every_s`` seconds while the block runs.

    A server's poll is a call into it that is collected at a later look, so a server busy in a long call (vLLM's
    engine start) is never taken for dead. Deaths found after the block (Ray ends the servers when the run is
    over) are not reported.
    """

    def __init__(self, on_death, every_s: float = 2.0):
        self.on_death, self.every_s = on_death, every_s
        self.death: str | None = None
        self.servers: dict[str, object] = {}  # name -> actor handle
        self.pending: dict[str, object] = {}  # name -> the poll in flight
        self._armed = threading.Lock()
        self._stop = threading.Event()

    def __enter__(self) -> EngineWatch:
        self._thread = threading.Thread(target=self._run, name="rg-verl-engine-watch", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop watching; no death is reported after this returns."""
        with self._armed:
            self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                death = self.look()
            except Exception as error:  # noqa: BLE001 - a failed look must not end the run; the next one may work
                logger.debug("could not poll the rollout servers: %s", error)
                continue
            if death is not None:
                with self._armed:
                    if self._stop.is_set():
                        return
                    self.death = death
                    self._stop.set()
                logger.error("stopping the run: %s", death)
                self.on_death(death)
                return

    def look(self) -> str | None:
        """One poll of every rollout server; what died, or None."""
        import ray
        from ray.exceptions import RayActorError

        if not ray.is_initialized():
            return None
        for name in ray.util.list_named_actors():
            if is_rollout_server(name) and name not in self.servers:
                self.servers[name] = ray.get_actor(name)
        for name, server in self.servers.items():
            poll = self.pending.get(name)
            if poll is None:
                self.pending[name] = server.__ray_call__.remote(engine_error)
                continue
            ready, _ = ray.wait([poll], timeout=0)
            if not ready:
                continue  # busy: asked again once it answers
            del self.pending[name]
            try:
                error = ray.get(poll)
            except RayActorError as died:
                return self.describe_dead_actor(name, died)
            if error is not None:
                return f"the vLLM engine of {server_label(name)} died: {error}"
        return None

    @staticmethod
    def describe_dead_actor(name: str, error: Exception) -> str:
        """A dead server in words: Ray's state API's account where it answers (pid, node, cause), else Ray's error."""
        for actor in dead_actors():
            if actor.name == name:
                return actor.describe()
        first = next((line.strip() for line in str(error).splitlines() if line.strip()), type(error).__name__)
        return f"the Ray actor {name!r} died: {first}"
