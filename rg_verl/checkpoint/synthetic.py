"""Real verl FSDP checkpoints, written over gloo on the CPU by ``torch.multiprocessing.spawn`` workers, for tests
and benchmarks; not imported by :mod:`rg_verl.checkpoint`, which needs neither verl nor a process group."""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from collections.abc import Iterable, Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

__all__ = [
    "cpu_mesh", "full_state", "gloo_group", "load_checkpoint", "quiet_worker", "save_checkpoint", "shard_like_verl",
]  # fmt: skip


def quiet_worker() -> None:
    """Silence warnings and logging below ERROR in this process: every rank would repeat each one."""
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)


@contextlib.contextmanager
def gloo_group(init_file: str | os.PathLike, rank: int, world_size: int) -> Iterator[None]:
    """The default process group over gloo, met through ``init_file``; destroyed when the block ends."""
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size)
    try:
        yield
    finally:
        dist.destroy_process_group()


def cpu_mesh(*shape: int, names: tuple[str, ...] = ("fsdp",)) -> DeviceMesh:
    """A CPU device mesh: ``cpu_mesh(3)`` for FSDP over 3 ranks, ``cpu_mesh(2, 1, names=("ddp", "fsdp"))`` HSDP."""
    return init_device_mesh("cpu", shape, mesh_dim_names=names)


def shard_like_verl(
    model: torch.nn.Module, mesh: DeviceMesh, layers: Iterable[torch.nn.Module] | None = None, **kwargs: Any
) -> torch.nn.Module:
    """FSDP2 as verl wraps a model, in place: ``fully_shard`` each decoder layer, then the root.

    ``layers`` default to ``model.model.layers`` (a PEFT model's lie deeper); ``kwargs`` go to every ``fully_shard``.
    """
    for layer in model.model.layers if layers is None else layers:
        fully_shard(layer, mesh=mesh, **kwargs)
    fully_shard(model, mesh=mesh, **kwargs)
    return model


def save_checkpoint(model: torch.nn.Module, actor_dir: str | os.PathLike, tokenizer: Any = None,
                    optimizer: torch.optim.Optimizer | None = None) -> None:  # fmt: skip
    """verl's ``FSDPCheckpointManager.save_checkpoint`` at step 1, from every rank; without ``optimizer``, the model."""
    from omegaconf import OmegaConf
    from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager

    config = OmegaConf.create({} if optimizer is not None else {"save_contents": ["model"]})
    manager = FSDPCheckpointManager(model, optimizer, None, processing_class=tokenizer, checkpoint_config=config)
    manager.save_checkpoint(str(actor_dir), global_step=1)


def load_checkpoint(model: torch.nn.Module, actor_dir: str | os.PathLike) -> None:
    """The model weights of ``actor_dir`` into the sharded ``model``, as verl resumes a run."""
    from omegaconf import OmegaConf
    from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager

    config = OmegaConf.create({"load_contents": ["model"]})
    FSDPCheckpointManager(model, None, None, checkpoint_config=config).load_checkpoint(str(actor_dir))


def full_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The state dict with every DTensor gathered by torch (a collective): the reference a conversion must match."""
    state = model.state_dict()
    return {k: (v.full_tensor() if isinstance(v, DTensor) else v).detach().clone() for k, v in state.items()}
