"""Tests for rg_verl.hf_rollout's registration with verl and rg_verl.hf_rollout.replica, without Ray.

Ray and verl's platform are replaced by recording stand-ins, so each test sees exactly what the replica
asks Ray for (the server actor's name, placement, environment and arguments) and what the adapter
forwards to its server.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace as NS

import pytest
import torch
from omegaconf import OmegaConf
from verl.workers.rollout.base import get_rollout_class
from verl.workers.rollout.replica import RolloutMode, RolloutReplicaRegistry

import rg_verl.hf_rollout as hf_rollout
from rg_verl.hf_rollout import replica
from rg_verl.hf_rollout.replica import HFReplica, HFServerAdapter, server_name
from rg_verl.hf_rollout.server import HFRolloutServer

# Ray node ids are 28 bytes in hex
NODE, OTHER_NODE = "a1" * 28, "b2" * 28


def _done(value=None):
    """An awaitable that gives ``value``, as an ObjectRef of a finished Ray call does."""

    async def result():
        return value

    return result()


def test_the_backend_is_registered_with_verl_on_both_sides():
    assert hf_rollout.NAME == "hf"
    assert RolloutReplicaRegistry.get("hf") is HFReplica  # the driver side
    assert get_rollout_class("hf", "async") is HFServerAdapter  # the training-worker side


def test_replica_and_adapter_agree_on_the_server_name():
    assert server_name(0) == "rg_verl_hf_server_0"
    assert len({server_name(rank) for rank in range(4)}) == 4


def rollout_config(**overrides) -> NS:
    sizes = {"tensor_model_parallel_size": 1, "data_parallel_size": 1, "pipeline_model_parallel_size": 1}
    fields = {
        "prompt_length": 16,
        "response_length": 8,
        "max_num_seqs": 4,
        "seed": 10,
        "dtype": "float32",
        "enable_prefix_caching": False,
    }
    return NS(**{**sizes, **fields, **overrides})


def make_replica(rank: int = 2, model: dict | None = None, **overrides) -> HFReplica:
    model_config = OmegaConf.create(model or {"path": "org/model"})
    made = HFReplica(replica_rank=rank, config=rollout_config(**overrides), model_config=model_config, gpus_per_node=8)
    made.rollout_mode = RolloutMode.HYBRID
    return made


class FakeRay:
    """The parts of ``ray`` that launch_servers uses; records the server actor it is asked for."""

    def __init__(self, node: str, devices: list[str]):
        self.context = NS(get_node_id=lambda: node, get_accelerator_ids=lambda: {"GPU": devices} if devices else {})
        self.actors = []

    def get_runtime_context(self):
        return self.context

    def remote(self, cls):
        actor = NS(cls=cls, options=None, kwargs=None, ready_awaited=False)
        self.actors.append(actor)

        def start(**kwargs):
            actor.kwargs = kwargs

            def ready():
                actor.ready_awaited = True
                return _done()

            actor.handle = NS(ready=NS(remote=ready))
            return actor.handle

        def options(**options):
            actor.options = options
            return NS(remote=start)

        return NS(options=options)


class FakeWorker:
    """A training worker: ``__ray_call__`` runs the function on the worker, as Ray would."""

    def __init__(self):
        self.__ray_call__ = NS(remote=lambda fn: _done(fn(self)))


@pytest.fixture
def fake_ray(monkeypatch):
    def install(node: str = OTHER_NODE, devices: list[str] | None = None) -> FakeRay:
        fake = FakeRay(node, devices or [])
        platform = NS(
            ray_resource_name=lambda: "GPU",
            ray_noset_envvars=lambda: ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"],
            visible_devices_envvar=lambda: "CUDA_VISIBLE_DEVICES",
        )
        monkeypatch.setattr(replica, "ray", fake)
        monkeypatch.setattr(replica, "get_platform", lambda: platform)
        return fake

    return install


def test_launch_starts_one_server_beside_its_worker_on_the_workers_devices(fake_ray):
    fake = fake_ray(node=NODE, devices=["3"])
    made = make_replica(rank=2, model={"path": "org/model", "local_path": "/cache/model"})
    made.workers = [FakeWorker()]
    asyncio.run(made.launch_servers())
    (actor,) = fake.actors
    assert actor.cls is HFRolloutServer and actor.ready_awaited
    options = actor.options
    assert options["name"] == server_name(2) and options["max_concurrency"] == made.max_concurrency
    strategy = options["scheduling_strategy"]
    assert (strategy.node_id, strategy.soft) == (NODE, False)  # on the worker's node, no fallback
    assert options["runtime_env"] == {
        "env_vars": {"RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1", "CUDA_VISIBLE_DEVICES": "3"}
    }
    assert actor.kwargs == {
        "model_path": "/cache/model",  # the downloaded copy, where verl has one
        "prompt_length": 16,
        "response_length": 8,
        "max_num_seqs": 4,
        "seed": 12,  # each replica samples with its own seed
        "dtype": "float32",
        "prefix_caching": False,  # rollout.enable_prefix_caching
    }
    assert made.servers == [actor.handle] and made.server_handle is actor.handle
    assert made.server_address == server_name(2)


def test_launch_without_accelerators_sets_no_visible_devices(fake_ray):
    fake = fake_ray(devices=[])
    made = make_replica(rank=0)
    made.workers = [FakeWorker()]
    asyncio.run(made.launch_servers())
    (actor,) = fake.actors
    assert actor.options["runtime_env"] == {"env_vars": {"RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1"}}
    assert actor.kwargs["model_path"] == "org/model" and actor.kwargs["seed"] == 10


@pytest.mark.parametrize("size", ["tensor_model_parallel_size", "data_parallel_size", "pipeline_model_parallel_size"])
def test_launch_refuses_a_replica_of_more_than_one_device(fake_ray, size):
    fake = fake_ray()
    made = make_replica(**{size: 2})
    with pytest.raises(ValueError, match=r"supports one device per replica; .*got a replica world size of 2"):
        asyncio.run(made.launch_servers())
    assert fake.actors == []


@pytest.mark.parametrize("mode", [RolloutMode.COLOCATED, RolloutMode.STANDALONE])
def test_launch_refuses_modes_other_than_hybrid(fake_ray, mode):
    fake = fake_ray()
    made = make_replica()
    made.rollout_mode = mode
    with pytest.raises(NotImplementedError, match="colocated with training only"):
        asyncio.run(made.launch_servers())
    assert fake.actors == []


# ---- the adapter, in the training worker


class FakeServer:
    """The server actor's handle: records each weight sync."""

    def __init__(self):
        self.syncs = []
        self.update_weights = NS(remote=self._update)

    def _update(self, state_dict, global_steps, **kwargs):
        self.syncs.append((state_dict, global_steps, kwargs))
        return _done()


@pytest.fixture
def adapter(monkeypatch):
    server, looked_up = FakeServer(), []

    def get_actor(name):
        looked_up.append(name)
        return server

    monkeypatch.setattr(replica, "ray", NS(get_actor=get_actor))
    made = HFServerAdapter(None, None, None, replica_rank=3)
    return made, server, looked_up


def test_the_adapters_replica_rank_defaults_to_the_workers_rank(monkeypatch):
    monkeypatch.setenv("RANK", "5")
    assert HFServerAdapter(None, None, None).replica_rank == 5
    assert HFServerAdapter(None, None, None, replica_rank=1).replica_rank == 1
    monkeypatch.delenv("RANK")
    assert HFServerAdapter(None, None, None).replica_rank == 0


def test_update_weights_forwards_cpu_copies_of_every_tensor(adapter):
    made, server, looked_up = adapter
    weights = {"a": torch.ones(2, requires_grad=True), "b": torch.arange(3.0)}
    drained = []

    def generator():
        for name, tensor in weights.items():
            drained.append(name)
            yield name, tensor

    asyncio.run(made.update_weights(generator(), global_steps=7))
    asyncio.run(made.update_weights(iter([("a", torch.zeros(2))]), global_steps=8))
    assert drained == ["a", "b"] and looked_up == [server_name(3)]  # looked up once, then kept
    (state, step, kwargs), (later, later_step, _) = server.syncs
    assert (step, later_step) == (7, 8) and kwargs == {"peft_config": None, "adapter_only": False}
    assert set(state) == {"a", "b"} and torch.equal(state["b"], weights["b"])
    for name, tensor in state.items():
        assert tensor.device.type == "cpu" and not tensor.requires_grad
        assert tensor.data_ptr() != weights[name].data_ptr()  # a copy: the trainer may change its tensor next
    assert torch.equal(later["a"], torch.zeros(2))


@pytest.mark.parametrize(("base_sync_done", "adapter_only"), [(False, False), (True, True)])
def test_update_weights_with_lora_sends_the_base_once_then_the_adapter(adapter, base_sync_done, adapter_only):
    made, server, _ = adapter
    peft = {"r": 8, "lora_alpha": 16, "target_modules": ["q_proj"]}
    asyncio.run(made.update_weights(iter([]), global_steps=1, peft_config=peft, base_sync_done=base_sync_done))
    ((_, _, kwargs),) = server.syncs
    assert kwargs == {"peft_config": peft, "adapter_only": adapter_only}


def test_update_weights_refuses_other_wire_formats(adapter):
    made, server, looked_up = adapter
    with pytest.raises(NotImplementedError, match="full named tensors, not 'bucketed'"):
        asyncio.run(made.update_weights(iter([]), wire_format="bucketed"))
    assert server.syncs == [] and looked_up == []


def test_the_adapter_keeps_weights_resident_and_generates_through_the_server(adapter):
    made, server, looked_up = adapter
    assert asyncio.run(made.resume(["weights", "kv_cache"])) is None
    assert asyncio.run(made.release()) is None
    assert server.syncs == [] and looked_up == []
    with pytest.raises(NotImplementedError, match="through its server"):
        made.generate_sequences(None)
