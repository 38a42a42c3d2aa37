"""The CPU platform plugin: registration, the device-module stand-in and gloo collectives."""


import pytest
import torch
import torch.distributed as dist
from hypothesis import given
from hypothesis import strategies as st
from verl.plugin.platform import PlatformRegistry

import rg_verl.cpu
from rg_verl.cpu import device
from rg_verl.cpu.platform import merge_backend_pairs


def test_platform_is_registered_as_cpu_and_uses_gloo():
    assert PlatformRegistry.get("cpu") is rg_verl.cpu.PlatformCPU
    platform = rg_verl.cpu.PlatformCPU()
    assert platform.device_name == "cpu"
    assert platform.current_device() == "cpu"
    assert torch.zeros(1).to(platform.current_device()).device.type == "cpu"
    assert platform.communication_backend_name() == "gloo"
    assert platform.ray_resource_name() == "GPU"  # Ray schedules on logical GPUs
    assert platform.device_module is device


def test_device_module_rng_round_trip():
    state = device.get_rng_state()
    first = torch.rand(3)
    device.set_rng_state(state)
    assert torch.equal(torch.rand(3), first)


def test_device_module_reports_host_memory():
    free, total = device.mem_get_info()
    assert 0 < free <= total
    assert device.memory_allocated() > 0


@given(st.lists(st.sampled_from(["cpu:gloo", "cuda:nccl", "npu:hccl"]), min_size=1, max_size=6))
def test_merge_backend_pairs_keeps_first_occurrence_of_each_pair(pairs):
    merged = merge_backend_pairs(",".join(pairs)).split(",")
    assert merged == list(dict.fromkeys(pairs))


def test_verl_backend_string_initialises_a_gloo_group(tmp_path):
    """verl asks for "cpu:gloo,{device}:{backend}"; on this platform that must work."""
    if dist.is_initialized():
        pytest.skip("a process group already exists in this process")
    dist.init_process_group(
        backend="cpu:gloo,cpu:gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        tensor = torch.ones(2)
        dist.all_reduce(tensor)
        assert torch.equal(tensor, torch.ones(2))
        assert "gloo" in dist.get_backend()
    finally:
        dist.destroy_process_group()


def test_pin_memory_is_a_no_op_without_accelerator():
    if torch.accelerator.is_available():
        pytest.skip("pinned memory exists on this machine")
    tensor = torch.arange(4)
    assert tensor.pin_memory() is tensor
