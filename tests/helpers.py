"""What several test modules share: the repository root, running train_grpo.py, verl's metrics, deadlines, an
unhurried reward."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

from rg_verl.grpo.reward_curve import read_metrics

__all__ = [
    "CONFIGS_DIR", "REPO", "read_metrics", "run_train_grpo", "session_processes", "start_train_grpo", "stop_session",
    "train_on_cpu", "unhurried_scoring", "wait_for_text", "within",
]  # fmt: skip

REPO = Path(__file__).resolve().parents[1]
CONFIGS_DIR = REPO / "configs"

# a train_grpo.py run on the CPU that takes longer than this has hung
TRAIN_TIMEOUT_S = 1800
# Ray's dashboard off: it costs a run about 7 CPU-seconds of the suite's two cores (pairs of 2-step smoke runs, 73/63
# and 68/63), and only the dead-worker naming (rg_verl/grpo/workers.py) reads Ray's state API through it;
# tests/e2e/test_faults.py, which checks that naming, starts its runs itself. A run that joins a running cluster
# keeps the cluster's own dashboard (ray.init ignores the setting there).
NO_DASHBOARD = "++ray_kwargs.ray_init.include_dashboard=false"


def plugin_env(*modules: str) -> dict[str, str]:
    """The environment that loads the test-only verl plugins ``tests/<module>.py`` in the driver and every Ray
    worker (verl imports ``VERL_USE_EXTERNAL_MODULES``; the module names are top-level on purpose: verl's wheel
    installs a ``tests`` package of its own). They are put on the path from a folder of their own: ``tests/`` itself
    would put ``tests/vllm`` in the place of vLLM."""
    folder = Path(tempfile.mkdtemp(prefix="rg_verl_plugins_"))
    for module in modules:
        (folder / f"{module}.py").symlink_to(REPO / "tests" / f"{module}.py")
    inherited = [m for m in os.environ.get("VERL_USE_EXTERNAL_MODULES", "").split(",") if m]
    return {
        "PYTHONPATH": os.pathsep.join([str(folder), *filter(None, [os.environ.get("PYTHONPATH")])]),
        "VERL_USE_EXTERNAL_MODULES": ",".join([*inherited, *modules]),
    }


def run_train_grpo(
    workdir: Path,
    *args: str,
    env: dict[str, str | None] | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess:
    """``python train_grpo.py *args`` in ``workdir``, with ``env`` added to this process's environment, Ray's
    dashboard off (:data:`NO_DASHBOARD`).

    A variable set to None in ``env`` is removed. With ``check`` a non-zero exit fails the test,
    showing the end of the run's output. A run still going after :data:`TRAIN_TIMEOUT_S` has hung: its whole
    process group (Ray's and vLLM's processes with it) is killed, and the test fails with the end of its output,
    which shows where it stopped.
    """
    environ = {key: value for key, value in {**os.environ, **(env or {})}.items() if value is not None}
    cmd = [sys.executable, str(REPO / "train_grpo.py"), *args, NO_DASHBOARD]
    with subprocess.Popen(cmd, cwd=workdir, env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as child:  # fmt: skip
        try:
            stdout, stderr = child.communicate(timeout=TRAIN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            stdout, stderr = child.communicate()
            raise AssertionError(
                f"train_grpo.py hung: still running after {TRAIN_TIMEOUT_S} s, killed; its output ended with\n"
                + stdout[-3000:] + stderr[-3000:]
            ) from None
        except BaseException:  # the test's own time limit, ^C: the run goes with the test
            os.killpg(child.pid, signal.SIGKILL)
            raise
    proc = subprocess.CompletedProcess(cmd, child.returncode, stdout, stderr)
    if check:
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return proc


def start_train_grpo(workdir: Path, *args: str, log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """``python train_grpo.py *args`` in ``workdir`` in the background, Ray's dashboard off, in a session of its own
    (every process of the run, Ray's and vLLM's, is in it: :func:`session_processes`); its output goes to ``log``."""
    cmd = [sys.executable, str(REPO / "train_grpo.py"), *args, NO_DASHBOARD]
    with open(log, "w") as out:
        return subprocess.Popen(cmd, cwd=workdir, env={**os.environ, **(env or {})}, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip


def wait_for_text(run: subprocess.Popen, log: Path, text: str, timeout_s: float) -> bool:
    """Wait until ``text`` is in ``log`` (True), or the run ended or ``timeout_s`` passed (False)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and run.poll() is None:
        if text in log.read_text(errors="replace"):
            return True
        time.sleep(0.2)
    return text in log.read_text(errors="replace")


def session_processes(session: int) -> list[int]:
    """The live processes of the session ``session`` (a run started by :func:`start_train_grpo`: its pid)."""
    import psutil

    found = []
    for process in psutil.process_iter(["status"]):
        with contextlib.suppress(OSError, psutil.Error):
            if os.getsid(process.pid) == session and process.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(process.pid)
    return found


def stop_session(run: subprocess.Popen) -> None:
    """SIGKILL every process of the run's session (a test that failed leaves nothing running)."""
    for pid in session_processes(run.pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        run.wait(timeout=30)


def train_on_cpu(
    tmp_path, config_dir: str, name: str, steps: int, *extra: str, env=None, save: bool = False
) -> dict[int, dict]:
    """Train an experiment config, unchanged but for overrides that shrink it to a CPU; metrics per step.

    The tiny model is built in ``tmp_path/model``; with ``save`` the last step is saved in ``tmp_path/ckpt``.
    """
    from rg_verl.cpu.tiny_model import build_tiny_model

    model = build_tiny_model(tmp_path / "model")
    metrics = tmp_path / "metrics.jsonl"
    overrides = [
        # the device and the model
        "trainer.device=cpu",
        "actor_rollout_ref.rollout.name=hf",  # the experiment configs roll out with vllm
        f"actor_rollout_ref.model.path={model}",
        "trainer.n_gpus_per_node=1",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        # the sizes
        "data.train_batch_size=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.rollout.n=2",
        "data.max_prompt_length=512",
        "data.max_response_length=16",
        "data.dataloader_num_workers=0",
        "reasoning_gym.train_size=16",
        "reasoning_gym.val_size=4",
        "reward.num_workers=1",
        "actor_rollout_ref.rollout.agent.num_workers=1",
        # a few steps, validated at the end, saved on request
        f"trainer.total_training_steps={steps}",
        "trainer.val_before_train=false",
        f"trainer.test_freq={steps}",
        f"trainer.save_freq={steps if save else -1}",
        f"trainer.default_local_dir={tmp_path / 'ckpt'}",
        "trainer.logger=[console,file]",
        *extra,
    ]
    run_train_grpo(
        tmp_path,
        "--config-path",
        config_dir,
        "--config-name",
        name,
        *overrides,
        env={**(env or {}), "VERL_FILE_LOGGER_PATH": str(metrics)},
    )
    return read_metrics(metrics)


@contextlib.contextmanager
def unhurried_scoring(limit_s: float = 120.0) -> Iterator[None]:
    """The reward's per-answer time limit raised to ``limit_s`` while the block runs, in this process.

    A reference answer scores in about 10 ms, but on a loaded machine a bounded worker can wait for the CPU past the
    reward's 0.9 s limit (a Ray actor runs at nice 15, and its workers inherit that), and the answer then scores 0.
    Tests that check what an answer scores use this; the tests of the limit itself do not."""
    from rg_verl.reward import score

    with mock.patch.object(score, "SCORE_TIMEOUT_S", limit_s):
        yield


def within(limit_s: float, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` on a helper thread, as verl's reward loop calls the reward.

    A call still running after ``limit_s`` seconds fails the test instead of stalling the suite.
    It is a deadline against hangs, not a speed measurement: speed is measured in ``bench/``.
    """
    out: list[Any] = []
    errors: list[BaseException] = []

    def target() -> None:
        try:
            out.append(fn(*args, **kwargs))
        except BaseException as error:  # re-raised in the test's thread
            errors.append(error)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(limit_s)
    assert not thread.is_alive(), f"{getattr(fn, '__name__', fn)} still running after {limit_s} s"
    if errors:
        raise errors[0]
    return out[0]


# W&B's transaction log (a run's run-<id>.wandb): a 7-byte header, then LevelDB's log format of 32 KiB blocks, each
# record a 7-byte header (crc32c, length, type) and a piece of a protobuf wandb.proto.wandb_internal_pb2.Record
_WANDB_MAGIC, _BLOCK, _FULL, _FIRST, _MIDDLE, _LAST = b":W&B", 32768, 1, 2, 3, 4


def wandb_records(path: Path) -> Iterator[Any]:
    """The records of a W&B run's transaction log, parsed with W&B's own protobuf schema."""
    from wandb.proto.wandb_internal_pb2 import Record

    data = Path(path).read_bytes()
    assert data[:4] == _WANDB_MAGIC, f"{path} is not a W&B transaction log"
    pos, pieces = 7, []
    while pos + 7 <= len(data):
        if _BLOCK - pos % _BLOCK < 7:  # a block's tail too short for a header is padding
            pos += _BLOCK - pos % _BLOCK
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0:  # zero padding to the end of the block
            pos += _BLOCK - pos % _BLOCK
            continue
        pieces.append(data[pos + 7 : pos + 7 + length])
        pos += 7 + length
        if kind in (_FULL, _LAST):
            record = Record()
            record.ParseFromString(b"".join(pieces))
            pieces = []
            yield record


def wandb_history(path: Path) -> dict[int, dict[str, Any]]:
    """step -> {key: value} of every ``run.log`` a W&B run's transaction log holds."""
    history: dict[int, dict[str, Any]] = {}
    for record in wandb_records(path):
        if record.WhichOneof("record_type") == "history":
            items = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
            history.setdefault(int(record.history.step.num), {}).update(items)
    return history
