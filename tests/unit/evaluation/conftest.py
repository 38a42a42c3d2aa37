import os

import pytest


@pytest.fixture(autouse=True)
def vllm_environment(monkeypatch):
    """The vllm backend sets the variables vLLM's CPU build reads in this process; each test leaves them as it
    found them."""
    for name in ("VLLM_TARGET_DEVICE", "VLLM_CPU_KVCACHE_SPACE"):
        original = os.environ.get(name)
        monkeypatch.setenv(name, "")  # recorded: restored (or removed) after the test
        if original is None:
            monkeypatch.delenv(name)
        else:
            monkeypatch.setenv(name, original)
