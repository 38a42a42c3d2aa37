"""A stand-in for ``torch.cuda`` on CPU: the calls verl makes on its device module."""

import psutil
import torch
from torch.cpu import (  # noqa: F401  (re-exported as part of the device-module interface)
    Event,
    Stream,
    current_stream,
    device_count,
    is_available,
    set_device,
    stream,
    synchronize,
)


def current_device() -> str:
    """verl passes this straight to ``tensor.to()``, so it names the device, not an index."""
    return "cpu"


def get_device_name(device=None) -> str:
    return "cpu"


def get_rng_state(device=None) -> torch.Tensor:
    return torch.get_rng_state()


def set_rng_state(state: torch.Tensor, device=None) -> None:
    torch.set_rng_state(state)


def manual_seed(seed: int) -> None:
    torch.manual_seed(seed)


manual_seed_all = manual_seed


def mem_get_info(device=None) -> tuple[int, int]:
    """(free, total) bytes of host memory, as ``torch.cuda.mem_get_info`` reports for a GPU."""
    vm = psutil.virtual_memory()
    return vm.available, vm.total


def memory_allocated(device=None) -> int:
    return psutil.Process().memory_info().rss


memory_reserved = max_memory_allocated = max_memory_reserved = memory_allocated


def empty_cache() -> None:
    """CPU tensors are freed by the allocator directly; there is no cache to empty."""


def ipc_collect() -> None:
    """No inter-process memory handles exist on CPU."""


def reset_peak_memory_stats(device=None) -> None:
    """Peak statistics are not tracked on CPU."""


def set_per_process_memory_fraction(fraction: float, device=None) -> None:
    """Host memory is not partitioned per process."""
