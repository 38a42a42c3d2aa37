import os

import pytest
import torch
from hypothesis import settings
from xdist.scheduler import LoadScopeScheduling

# nothing is downloaded in tests: a hub id (an evaluation config's model_path) fails at once instead of retrying
os.environ.setdefault("HF_HUB_OFFLINE", "1")

# Hypothesis checks behaviour here, never speed: its per-example deadline would fail a test whose machine is
# busy (two pytest workers share two cores), so it is off. In CI (CI set) each test's examples are derived from its
# name, so a run is repeatable and a new failure shows on every run, not one run in many; elsewhere they are
# random, to keep finding new cases.
settings.register_profile("rg_verl", deadline=None, derandomize=bool(os.environ.get("CI")))
settings.load_profile("rg_verl")

# test modules that run on another module's worker
SAME_WORKER = {
    # they read its session fixture (learn_demo and learn_comparison, tests/e2e/conftest.py): a run made once
    "tests/e2e/test_learning.py": "tests/e2e/test_compare.py",
    "tests/e2e/test_demo.py": "tests/e2e/test_compare.py",
    # two verl runs with the vLLM rollout must not overlap on one machine: verl 0.9.1 names the weight sync's socket
    # /tmp/rl-colocate-zmq-<Ray job id>-replica-0-rank-0.sock, and a run that starts its own Ray cluster is always
    # job 01000000, so the second run's bind would take the first one's socket (docs/multinode.md)
    "tests/vllm/test_lora_vllm.py": "tests/vllm/test_grpo_vllm.py",
    # the training runs' check that they left nothing in /dev/shm is exact only with no other vLLM engine on the
    # machine: an evaluator's engine on the other worker made its psm_* segments too fast to tell apart, and one was
    # counted as a run's in a clean-clone CI run (tests/vllm/conftest.py, SegmentWatch)
    "tests/vllm/test_evaluate_vllm.py": "tests/vllm/test_grpo_vllm.py",
}


class ModuleScheduling(LoadScopeScheduling):
    """``make test`` runs two pytest-xdist workers. Each takes whole test modules (so a module's fixtures are made
    once), in collection order with ``--no-loadscope-reorder`` (the long end-to-end modules start first); the
    modules of :data:`SAME_WORKER` go with the module named there."""

    def _split_scope(self, nodeid: str) -> str:
        module = nodeid.split("::", 1)[0]
        return SAME_WORKER.get(module, module)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    return ModuleScheduling(config, log)


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def search_cache(tmp_path_factory, monkeypatch):
    """Each test keeps its held-out searches in a folder of its own (rg_verl.data.search_cache), not in the
    user's cache: a search made under a test's patches never reaches another test."""
    folder = tmp_path_factory.mktemp("searches")
    monkeypatch.setenv("RG_VERL_SEARCH_CACHE", str(folder))
    return folder


@pytest.fixture(scope="session", autouse=True)
def hub_cache(tmp_path_factory):
    """A Hugging Face cache of the hub models the shipped configs and the tests name (tests/hub_cache.py: their
    config.json only), where huggingface_hub looks for one in this process (its constants, read at import) and in the
    processes tests start (HF_HUB_CACHE): those ids resolve as on a machine that has downloaded them."""
    from huggingface_hub import constants

    from tests.hub_cache import write_hub_cache

    root = str(write_hub_cache(tmp_path_factory.mktemp("hf_hub")))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_CACHE", root)
        patch.setattr(constants, "HF_HUB_CACHE", root)
        yield root


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """The tiny random model (rg_verl.cpu.tiny_model's defaults), built once per worker for every test that
    only needs a model."""
    from rg_verl.cpu.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="session", autouse=True)
def math_data(tmp_path_factory):
    """Small GSM8K and MATH files where the shipped math configs look for them (``RG_VERL_DATA``)."""
    from tests.math_fixtures import write_math_dirs

    root = write_math_dirs(tmp_path_factory.mktemp("math_data"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RG_VERL_DATA", str(root))
        yield root


@pytest.fixture
def no_scoring_deadline():
    """The reward's 0.9 s limit per answer raised while a test runs (``pytest.mark.usefixtures``): a math or
    sympy answer scores in milliseconds, but a loaded machine can stall a scoring worker past the limit. For tests
    of what answers score, not of the limit (tests/unit/reward/test_time_limit.py)."""
    from tests.helpers import unhurried_scoring

    with unhurried_scoring():
        yield
