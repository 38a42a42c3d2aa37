"""The ``hf`` rollout replica (driver side) and its server adapter (training-worker side)."""

import logging
import os

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
from verl.plugin.platform import get_platform
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutMode, RolloutReplica

from rg_verl.hf_rollout.server import HFRolloutServer

logger = logging.getLogger(__name__)


def server_name(replica_rank: int) -> str:
    """Ray actor name of a replica's server, shared by the replica and the adapter."""
    return f"rg_verl_hf_server_{replica_rank}"


class HFReplica(RolloutReplica):
    """Launches one ``transformers`` server per replica, next to its training worker."""

    async def launch_servers(self):
        if self.world_size != 1:
            raise ValueError(
                "actor_rollout_ref.rollout.name=hf supports one device per replica; set "
                "actor_rollout_ref.rollout.tensor_model_parallel_size=1 (and data/pipeline parallel size 1), "
                f"got a replica world size of {self.world_size}"
            )
        if self.rollout_mode != RolloutMode.HYBRID:
            raise NotImplementedError(f"the hf rollout runs colocated with training only, not {self.rollout_mode}")
        platform = get_platform()
        resource = platform.ray_resource_name()
        node_id, devices = await self.workers[0].__ray_call__.remote(
            lambda worker: (
                ray.get_runtime_context().get_node_id(),
                ray.get_runtime_context().get_accelerator_ids().get(resource, []),
            )
        )
        env_vars = {var: "1" for var in platform.ray_noset_envvars()}
        if devices:  # see the worker's accelerator, as vLLM's server does
            env_vars[platform.visible_devices_envvar()] = ",".join(devices)
        name = server_name(self.replica_rank)
        # verl hands the replica its model section as a DictConfig, not yet an HFModelConfig
        model_path = self.model_config.get("local_path") or self.model_config.get("path")
        server = (
            ray.remote(HFRolloutServer)
            .options(
                name=name,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
                runtime_env={"env_vars": env_vars},
                max_concurrency=self.max_concurrency,
            )
            .remote(
                model_path=model_path,
                prompt_length=self.config.prompt_length,
                response_length=self.config.response_length,
                max_num_seqs=self.config.max_num_seqs,
                seed=self.config.seed + self.replica_rank,
                dtype=self.config.dtype,
                prefix_caching=self.config.enable_prefix_caching,
            )
        )
        await server.ready.remote()
        self.servers = [server]
        self._server_handle = server
        self._server_address = name
        logger.info("hf rollout server %s started on node %s (devices %s)", name, node_id, devices or "none")


class HFServerAdapter(BaseRollout):
    """Lives in the training worker: forwards each step's weights to this replica's server."""

    def __init__(self, config, model_config, device_mesh, replica_rank: int = -1, **kwargs):
        super().__init__(config, model_config, device_mesh)
        rank = int(os.environ.get("RANK", 0))
        self.replica_rank = rank if replica_rank == -1 else replica_rank  # one device per replica
        self._server = None

    def _server_handle(self):
        if self._server is None:
            self._server = ray.get_actor(server_name(self.replica_rank))
        return self._server

    async def update_weights(
        self,
        weights,
        wire_format: str = "named_tensors",
        global_steps: int | None = None,
        peft_config: dict | None = None,
        base_sync_done: bool = True,
        **kwargs,
    ):
        """Forward one weight sync to the server."""
        if wire_format != "named_tensors":
            raise NotImplementedError(f"the hf rollout takes full named tensors, not {wire_format!r}")
        # every rank drains the generator: gathering the FSDP shards is a collective
        state_dict = {name: tensor.detach().to("cpu", copy=True) for name, tensor in weights}
        adapter_only = peft_config is not None and base_sync_done
        await self._server_handle().update_weights.remote(
            state_dict, global_steps, peft_config=peft_config, adapter_only=adapter_only
        )

    async def resume(self, tags: list[str]):
        """The server keeps its weights resident; nothing to bring back."""

    async def release(self):
        """The server keeps its weights resident; nothing to free."""

    def generate_sequences(self, prompts):
        raise NotImplementedError("the hf rollout serves requests through its server (async mode)")
