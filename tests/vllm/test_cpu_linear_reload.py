"""rg_verl.common.vllm_engine.keep_linear_weights_reloadable in vLLM's CPU build: after vLLM's post-load step a linear
layer keeps its weight and the weight's loader, so verl's next weight sync can load into it, and the layer's matmul
follows each sync. Without it, vLLM drops the weight (what made every verl run with the vLLM rollout hang at its
first weight sync on a CPU with AMX tiles)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F


def linear_layer(weight: torch.Tensor) -> torch.nn.Module:
    """A layer as vLLM's linear layers hold their weight: a parameter with its ``weight_loader``, and no bias."""
    layer = torch.nn.Module()
    parameter = torch.nn.Parameter(weight.clone(), requires_grad=False)
    parameter.weight_loader = lambda param, loaded: param.data.copy_(loaded)
    layer.register_parameter("weight", parameter)
    layer.bias = None
    return layer


def test_a_linear_layer_keeps_its_weight_and_follows_each_sync(monkeypatch):
    from vllm.model_executor.layers.linear import UnquantizedLinearMethod
    from vllm.platforms import current_platform

    from rg_verl.common.vllm_engine import keep_linear_weights_reloadable

    if not current_platform.is_cpu():
        pytest.skip("vLLM runs on a GPU here: the CPU's post-load step does not apply")
    monkeypatch.setattr(UnquantizedLinearMethod, "process_weights_after_loading",
                        UnquantizedLinearMethod.process_weights_after_loading)  # fmt: skip (undone after the test)
    torch.manual_seed(0)
    first, second = torch.randn(64, 32), torch.randn(64, 32)
    x = torch.randn(4, 32)
    method = UnquantizedLinearMethod()

    assert keep_linear_weights_reloadable()
    layer = linear_layer(first)
    kept = layer.weight
    method.process_weights_after_loading(layer)
    assert layer.weight is kept and layer.weight.weight_loader is not None
    torch.testing.assert_close(method.apply(layer, x), F.linear(x, first), rtol=1e-4, atol=1e-4)
    # a weight sync: load into the kept parameter, then vLLM's post-load step again (verl runs it after each sync)
    layer.weight.weight_loader(layer.weight, second)
    method.process_weights_after_loading(layer)
    torch.testing.assert_close(method.apply(layer, x), F.linear(x, second), rtol=1e-4, atol=1e-4)
