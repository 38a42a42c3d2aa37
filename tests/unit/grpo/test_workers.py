"""rg_verl.grpo.workers: a dead Ray actor is found, described and turned into an error that says how to resume."""

from types import SimpleNamespace

import pytest

from rg_verl.grpo import workers
from rg_verl.grpo.workers import DeadActor, WorkerDiedError, raise_if_a_worker_died

# Ray's words (ray 2.60) for an actor whose process was SIGKILLed, and for one that called exit_actor()
KILLED = ("The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit "
          "detail: Worker unexpectedly exits with a connection error code 2. End of file. Some common causes "
          "include: (1) the process was killed by the OOM killer due to high memory usage")  # fmt: skip
LEFT = (
    "The actor is dead because its worker process has died. Worker exit type: INTENDED_USER_EXIT Worker exit "
    "detail: Worker exits by an user request. Worker exits with an exit code 0. exit_actor() is called."
)


# this process's Ray context as dead_actors reads it
CONTEXT = SimpleNamespace(gcs_address="127.0.0.1:1", get_job_id=lambda: "03000000")


def state(name: str, message: str, reason: str = "WORKER_DIED", pid: int = 4242) -> SimpleNamespace:
    """An actor as ray.util.state.list_actors(detail=True) gives it."""
    context = {"error_message": message, "reason": reason, "node_ip_address": "10.0.0.7", "pid": pid}
    return SimpleNamespace(class_name="HFRolloutServer", name=name, pid=pid,
                           death_cause={"actor_died_error_context": context})  # fmt: skip


def test_a_killed_actor_is_named_with_its_pid_node_and_cause_without_rays_generic_advice():
    actor = workers._from_state(state("rg_verl_hf_server_0", KILLED))
    assert actor == DeadActor("HFRolloutServer", "rg_verl_hf_server_0", 4242, "10.0.0.7", KILLED.split(" Some")[0])
    assert actor.describe().startswith(
        "the Ray actor HFRolloutServer 'rg_verl_hf_server_0' (pid 4242, node 10.0.0.7) died: The actor is dead"
    )


def test_an_out_of_memory_kill_says_so():
    actor = workers._from_state(state("", "Task was killed due to the node running low on memory.", "OUT_OF_MEMORY"))
    assert actor.cause.startswith("OUT_OF_MEMORY: Task was killed")
    assert "HFRolloutServer (pid" in actor.describe()  # no name: the class alone


def test_actors_that_left_on_request_are_not_reported(monkeypatch):
    import ray
    import ray.util.state

    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.setattr(ray, "get_runtime_context", lambda: CONTEXT)
    listed = [state("rg_verl_hf_server_0", KILLED), state("leaver", LEFT, pid=7)]
    asked = []
    monkeypatch.setattr(ray.util.state, "list_actors", lambda **kwargs: asked.append(kwargs) or listed)
    assert [actor.name for actor in workers.dead_actors()] == ["rg_verl_hf_server_0"]
    # this job's actors only: a cluster that outlives runs keeps an earlier run's dead servers, of the same names
    assert asked[0]["filters"] == [("state", "=", "DEAD"), ("job_id", "=", "03000000")]


def test_an_unreachable_state_api_reports_nothing_and_leaves_the_refill_bound_to_stop_the_step(monkeypatch, caplog):
    import ray
    import ray.util.state

    def unreachable(**kwargs):
        raise ConnectionError("no dashboard")

    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.setattr(ray, "get_runtime_context", lambda: CONTEXT)
    monkeypatch.setattr(ray.util.state, "list_actors", unreachable)
    assert workers.dead_actors() == []
    assert "could not ask Ray which actors died (no dashboard)" in caplog.text


def test_without_ray_there_is_nothing_to_ask():
    assert workers.dead_actors() == []


def test_the_error_names_each_dead_actor_and_engine_in_one_line(monkeypatch, caplog):
    dead = [DeadActor("HFRolloutServer", "rg_verl_hf_server_0", 11, "10.0.0.7", "killed"),
            DeadActor("WorkerDict", "", 12, "10.0.0.8", "OUT_OF_MEMORY: low memory")]  # fmt: skip
    monkeypatch.setattr(workers, "dead_actors", lambda: dead)
    monkeypatch.setattr(workers, "dead_engines", lambda: [workers.engine_death("vllm_server_1_0", "EngineDeadError")])
    with pytest.raises(WorkerDiedError) as error:
        raise_if_a_worker_died("2 prompt group(s) lost a rollout request")
    assert str(error.value) == (
        "the Ray actor HFRolloutServer 'rg_verl_hf_server_0' (pid 11, node 10.0.0.7) died: killed; the Ray actor "
        "WorkerDict (pid 12, node 10.0.0.8) died: OUT_OF_MEMORY: low memory; the vLLM engine of rollout replica 1 "
        "(Ray actor 'vllm_server_1_0') died: EngineDeadError"
    )
    assert "2 prompt group(s) lost a rollout request, and a worker of this run is dead" in caplog.text


def test_no_dead_actor_no_error(monkeypatch):
    monkeypatch.setattr(workers, "dead_actors", lambda: [])
    monkeypatch.setattr(workers, "dead_engines", lambda: [])
    raise_if_a_worker_died("a group failed")


# Ray's ActorDiedError of a call to an actor whose process was SIGKILLed (ray 2.60's layout)
DIED = (
    "The actor died unexpectedly before finishing this task.\n\tclass_name: HFRolloutServer\n\tactor_id: 8f1e\n"
    "\tpid: 4242\n\tname: rg_verl_hf_server_0\n\tnamespace: abc\n\tip: 10.0.0.7\n" + KILLED
)


def test_a_dead_actor_is_read_off_rays_error_where_the_state_api_has_no_account():
    actor = workers.from_error("rg_verl_hf_server_0", RuntimeError(DIED))
    assert actor == DeadActor("HFRolloutServer", "rg_verl_hf_server_0", 4242, "10.0.0.7", KILLED.split(" Some")[0])
    assert workers.from_error("x", RuntimeError("gone")) == DeadActor("actor", "x", None, "", "no cause recorded")
