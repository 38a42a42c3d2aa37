"""rg_verl.grpo.watchdog (and the engine probe of rg_verl.grpo.workers): which Ray actors are rollout servers, what
a dead vLLM engine says, and the watch itself on a real Ray cluster (a server whose engine died, a server actor
SIGKILLed, a busy server that is not dead)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest

from rg_verl.grpo.workers import engine_error, exit_text, is_rollout_server, server_label


@pytest.mark.parametrize(
    ("name", "server", "label"),
    [("vllm_server_0_0", True, "rollout replica 0 (Ray actor 'vllm_server_0_0')"),
     ("vllm_server_reward_1_0", True, "rollout replica 1 (Ray actor 'vllm_server_reward_1_0')"),
     ("rg_verl_hf_server_3", True, "rollout replica 3 (Ray actor 'rg_verl_hf_server_3')"),
     ("sglang_server_2_1", True, "rollout replica 2 (Ray actor 'sglang_server_2_1')"),
     ("WorkerDict", False, "the Ray actor 'WorkerDict'"), ("observer", False, "the Ray actor 'observer'")],
)  # fmt: skip
def test_rollout_servers_are_known_by_their_ray_names(name, server, label):
    assert is_rollout_server(name) is server
    assert server_label(name) == label


def test_exit_codes_in_words():
    assert [exit_text(c) for c in (-9, -15, 1, None)] == [
        "killed by SIGKILL", "killed by SIGTERM", "exited with code 1", "ended"
    ]  # fmt: skip


class EngineDeadError(Exception):
    pass


def vllm_server(errored: bool, finished: dict | None = None):
    """verl's vLLMHttpServer as engine_error sees it: its AsyncLLM, and vLLM's record of the engine core processes."""
    manager = SimpleNamespace(finished_procs=lambda: finished or {})
    core = SimpleNamespace(resources=SimpleNamespace(engine_manager=manager))
    engine = SimpleNamespace(errored=errored, dead_error=EngineDeadError("see the log"), engine_core=core)
    return SimpleNamespace(engine=engine)


def test_a_running_engine_or_a_server_without_one_is_alive():
    assert engine_error(vllm_server(errored=False)) is None
    assert engine_error(SimpleNamespace()) is None  # the hf server, or a vLLM server still starting


def test_a_dead_engine_is_named_with_how_its_process_ended():
    assert engine_error(vllm_server(True, {"EngineCore_DP0": -9})) == (
        "EngineDeadError (EngineCore_DP0 killed by SIGKILL; vLLM's log above has its traceback, if it had one)"
    )
    assert engine_error(vllm_server(True)) == "EngineDeadError"


WATCH = textwrap.dedent(
    """
    import os, signal, sys, threading, time
    import ray
    from rg_verl.grpo.watchdog import EngineWatch

    class EngineDeadError(Exception):
        pass

    class Engine:
        def __init__(self):
            self.errored = False
            self.dead_error = EngineDeadError()

    @ray.remote
    class Server:
        def __init__(self):
            self.engine = Engine()
        async def kill_engine(self, dead=True):
            self.engine.errored = dead
        async def pid(self):
            return os.getpid()
        def block(self, seconds):
            time.sleep(seconds)

    def watch_until(seconds, then=None):
        found = []
        with EngineWatch(on_death=found.append, every_s=0.2) as watch:
            time.sleep(1)  # the watch has seen the servers
            if then is not None:
                then()
            deadline = time.monotonic() + seconds
            while not found and time.monotonic() < deadline:
                time.sleep(0.1)
        return found

    ray.init(num_cpus=4, include_dashboard=False)
    vllm = Server.options(name="vllm_server_0_0").remote()
    hf = Server.options(name="rg_verl_hf_server_1", max_concurrency=2).remote()
    other = Server.options(name="observer").remote()
    ray.get([vllm.pid.remote(), hf.pid.remote(), other.pid.remote()])
    print("alive:", watch_until(3))
    ray.get(other.kill_engine.remote())  # not a rollout server: not watched
    print("other:", watch_until(2))
    hf.block.remote(4)  # a server busy in a long call answers late, and is not dead
    print("busy:", watch_until(3))
    from rg_verl.grpo.workers import dead_engines
    print("probe alive:", dead_engines())
    print("engine:", watch_until(10, lambda: ray.get(vllm.kill_engine.remote())))
    print("probe:", dead_engines())
    ray.get(vllm.kill_engine.remote(False))
    print("server:", watch_until(20, lambda: os.kill(ray.get(hf.pid.remote()), signal.SIGKILL)))
    ray.shutdown()
    """
)


@pytest.mark.slow
def test_the_watch_finds_a_dead_engine_and_a_dead_server_and_nothing_else():
    done = subprocess.run([sys.executable, "-c", WATCH], capture_output=True, text=True, timeout=300)
    lines = dict(line.split(": ", 1) for line in done.stdout.splitlines() if ": " in line)
    assert done.returncode == 0, done.stderr[-3000:]
    assert lines["alive"] == "[]" and lines["other"] == "[]" and lines["busy"] == "[]"
    death = "the vLLM engine of rollout replica 0 (Ray actor 'vllm_server_0_0') died: EngineDeadError"
    assert lines["engine"] == str([death])
    assert lines["probe alive"] == "[]" and lines["probe"] == lines["engine"]  # the replay buffer's own probe
    # without Ray's dashboard, from Ray's own error: the class, the name, the pid and the cause
    assert lines["server"].startswith("[\"the Ray actor Server 'rg_verl_hf_server_1' (pid ")
    assert "died: The actor is dead because its worker process has died." in lines["server"]
