"""The CPU platform plugin: registration, the device-module stand-in and gloo collectives."""

import doctest
import multiprocessing

import torch
from hypothesis import given
from hypothesis import strategies as st
from verl.plugin.platform import PlatformRegistry

import rg_verl.cpu.platform
from rg_verl.cpu import device
from rg_verl.cpu.platform import PlatformCPU, merge_backend_pairs


def test_doctests():
    """The module is left out of --doctest-modules (importing it patches torch), so its doctests run here."""
    result = doctest.testmod(rg_verl.cpu.platform)
    assert result.attempted > 0 and result.failed == 0


def test_platform_is_registered_as_cpu_and_uses_gloo():
    assert PlatformRegistry.get("cpu") is PlatformCPU
    platform = PlatformCPU()
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
def test_merge_backend_pairs_keeps_each_pair_once_in_order(pairs):
    merged = merge_backend_pairs(",".join(pairs)).split(",")
    assert len(merged) == len(set(merged))  # no repeats
    assert set(merged) == set(pairs)  # nothing lost
    positions = [pairs.index(pair) for pair in merged]
    assert positions == sorted(positions)  # in the order each pair first appears


def test_merge_backend_pairs_keeps_a_single_pair_and_a_distinct_list():
    assert merge_backend_pairs("cpu:gloo") == "cpu:gloo"
    assert merge_backend_pairs("cpu:gloo, cpu:gloo ,cuda:nccl") == "cpu:gloo,cuda:nccl"


def _all_reduce_rank(rank: int, store: str, results) -> None:
    import torch.distributed as dist

    import rg_verl.cpu.platform  # noqa: F401  (what every Ray worker of a CPU run imports)

    dist.init_process_group(backend="cpu:gloo,cpu:gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    try:
        tensor = torch.tensor([float(rank + 1)])
        dist.all_reduce(tensor)
        results.put((rank, tensor.item(), dist.get_backend()))
    finally:
        dist.destroy_process_group()


def test_verl_backend_string_gives_a_working_two_rank_gloo_group(tmp_path):
    """verl asks for "cpu:gloo,{device}:{backend}"; two ranks on it must really exchange data."""
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    ranks = [context.Process(target=_all_reduce_rank, args=(r, str(tmp_path / "store"), results)) for r in (0, 1)]
    for process in ranks:
        process.start()
    for process in ranks:
        process.join(120)
        assert process.exitcode == 0, f"rank process exited with {process.exitcode}"
    got = sorted(results.get(timeout=10) for _ in ranks)
    assert [(rank, total) for rank, total, _ in got] == [(0, 3.0), (1, 3.0)]  # 1 + 2 on both ranks
    assert all("gloo" in backend for _, _, backend in got)
