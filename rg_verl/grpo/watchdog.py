"""The run's rollout servers, watched from the driver: a dead engine or server ends the run in seconds, by name."""

from __future__ import annotations

import logging
import threading

from rg_verl.grpo.workers import dead_actors, engine_death, engine_error, from_error, is_rollout_server

__all__ = ["EngineWatch"]

logger = logging.getLogger(__name__)

class EngineWatch:
    """A thread that polls the run's rollout servers every ``every_s`` seconds; a busy server is not taken for dead."""

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
            self._thread.join(timeout=2)  # a look in flight ends on its own; nothing it finds is reported

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
        from ray.exceptions import ActorDiedError, ActorUnavailableError

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
            except ActorDiedError as died:
                return self.describe_dead_actor(name, died)
            except ActorUnavailableError:  # for now (a network blip, a restart): asked again
                continue
            if error is not None:
                return engine_death(name, error)
        return None

    @staticmethod
    def describe_dead_actor(name: str, error: Exception) -> str:
        """A dead server in words (class, Ray name, pid, node, cause): Ray's state API's account, else Ray's error's."""
        found = [actor for actor in dead_actors() if actor.name == name]
        return (found[0] if found else from_error(name, error)).describe()
