"""rg_verl.grpo.stopping: signals become one exception in the main thread, the run's processes go, and the line a
stopped run ends with names what stopped it, its checkpoints and the command that resumes."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from rg_verl.grpo import stopping
from rg_verl.grpo.stopping import Interrupted, StopSignals, resume_command, stop_line, typed_argv


def complete_step(folder, step: int) -> None:
    path = folder / f"global_step_{step}"
    (path / "actor").mkdir(parents=True)
    (path / "actor" / "model_world_size_1_rank_0.pt").write_bytes(b"")
    (path / "data.pt").write_bytes(b"")


def test_the_line_names_the_reason_the_last_complete_checkpoint_the_interrupted_save_and_the_command(tmp_path):
    complete_step(tmp_path, 2)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("2")
    (tmp_path / "global_step_3" / "actor").mkdir(parents=True)  # the save that was under way
    line = stop_line("interrupted by SIGINT", tmp_path, command="python train_grpo.py x=1")
    assert line == (
        f"[rg-verl] the run stopped: interrupted by SIGINT; the last complete checkpoint is step 2 in {tmp_path} "
        "(global_step_3: an interrupted save, which the rerun reports and passes over); resume with: "
        "python train_grpo.py x=1"
    )
    assert "\n" not in line


def test_a_run_that_saved_nothing_starts_again(tmp_path):
    line = stop_line("the engine died", tmp_path / "never", command="rg-verl train")
    assert line.endswith("the engine died; no complete checkpoint; start again with: rg-verl train")


def test_the_resume_command_is_the_one_typed():
    assert resume_command(["train_grpo.py", "--config-name", "learn", "trainer.logger=[console,file]"]) == (
        "python train_grpo.py --config-name learn 'trainer.logger=[console,file]'"
    )
    assert resume_command(["/venv/bin/rg-verl", "train", "a=1"]) == "rg-verl train a=1"


def test_the_typed_command_line_outlasts_hydras():
    """The command line swaps sys.argv for Hydra's (an absolute config folder, a job name) while the run goes."""
    typed = ["train_grpo.py", "--config-name", "learn", "x=1"]
    assert typed_argv(["/venv/bin/python", "-u", "-X", "importtime", *typed]) == typed
    assert typed_argv(["/venv/bin/python", "/venv/bin/rg-verl", "train"]) == ["/venv/bin/rg-verl", "train"]
    script = "import sys; from rg_verl.grpo.stopping import resume_command; sys.argv = ['x.py', 'hydra.job.name=j']; "
    done = subprocess.run([sys.executable, "-c", script + "print(resume_command())"], capture_output=True, text=True)
    assert done.stdout.strip() == "python x.py hydra.job.name=j"  # -c: no script typed, so sys.argv it is


def wait_in_main_thread(seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.05)


def test_sigint_and_sigterm_raise_in_the_main_thread_with_their_reason_and_status():
    for signum, code in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
        with StopSignals() as signals, pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signum)
            wait_in_main_thread(5)
        assert (signals.reason, signals.code) == (f"interrupted by {signal.Signals(signum).name}", code)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handlers are put back


def test_a_death_found_by_another_thread_interrupts_the_main_thread_once():
    with StopSignals() as signals, pytest.raises(Interrupted, match="the engine died"):
        threading.Thread(target=signals.fire, args=("the engine died",)).start()
        wait_in_main_thread(5)
    signals.fire("a second death")  # the first reason stands
    assert (signals.reason, signals.code) == ("the engine died", 1)


def test_a_signal_that_was_ignored_is_taken_anyway(tmp_path):
    # a shell's background job starts with SIGINT ignored; the run must still stop on it
    script = (
        "import os, signal, time\n"
        "from rg_verl.grpo.stopping import StopSignals\n"
        "assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN\n"
        "with StopSignals():\n"
        "    try:\n"
        "        os.kill(os.getpid(), signal.SIGINT); time.sleep(5)\n"
        "    except KeyboardInterrupt:\n"
        "        print('stopped')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))  # fmt: skip
    assert done.stdout.strip() == "stopped", done.stderr


def test_a_process_that_ignores_sigterm_is_killed_after_the_grace():
    stubborn = subprocess.Popen([sys.executable, "-c", "import signal, time\n"
                                 "signal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ready', flush=True)\n"
                                 "time.sleep(60)"], stdout=subprocess.PIPE, text=True)  # fmt: skip
    polite = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    assert stubborn.stdout.readline().strip() == "ready"
    import psutil

    processes = [psutil.Process(stubborn.pid), psutil.Process(polite.pid)]
    killed = stopping.end_processes(processes, grace_s=1)
    assert [p.pid for p in killed] == [stubborn.pid]  # SIGTERM ended the other one
    assert not any(p.is_running() for p in processes)


def test_a_second_signal_while_tearing_down_kills_the_runs_processes_and_exits():
    script = (
        "import os, signal, subprocess, sys, time\n"
        "from rg_verl.grpo.stopping import StopSignals\n"
        "sleep = [sys.executable, '-c', 'import time; time.sleep(60)']\n"
        "quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # the test reads the pipes to the end\n"
        "before = subprocess.Popen(sleep, start_new_session=True, **quiet)\n"
        "with StopSignals() as signals:\n"
        "    child = subprocess.Popen(sleep, **quiet)\n"
        "    print(before.pid, child.pid, flush=True)\n"
        "    signals.tearing_down()\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    time.sleep(30)\n"
        "print('not reached')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    before, child = map(int, done.stdout.split()[:2])
    try:
        assert done.returncode == 130
        assert "SIGINT again: killing the run's processes" in done.stderr
        assert "not reached" not in done.stdout
        with pytest.raises(ProcessLookupError):
            os.kill(child, 0)  # the run's child: killed
        os.kill(before, 0)  # a child from before the run is not the run's: left alone
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(before, signal.SIGKILL)


RAY_SIGTERM = (
    "import os, signal, threading, time\n"
    "import ray\n"
    "from rg_verl.grpo.launch import SignalsAfterRayInit\n"
    "from rg_verl.grpo.stopping import StopSignals\n"
    "@ray.remote\n"
    "class Runner:\n"
    "    def run(self):\n"
    "        time.sleep(60)\n"
    "with StopSignals() as signals:\n"
    "    ray.init(num_cpus=1, include_dashboard=False)  # as run_ppo does, with Ray's own SIGTERM handler\n"
    "    runner = SignalsAfterRayInit(Runner, signals).remote()\n"
    "    threading.Timer(3, lambda: os.kill(os.getpid(), signal.SIGTERM)).start()\n"
    "    try:\n"
    "        ray.get(runner.run.remote())\n"
    "    except KeyboardInterrupt:\n"
    "        print('stopped:', signals.reason, signals.code, flush=True)\n"
    "ray.shutdown()\n"
)


@pytest.mark.slow
def test_sigterm_reaches_the_run_after_ray_put_its_own_handler_in():
    done = subprocess.run([sys.executable, "-c", RAY_SIGTERM], capture_output=True, text=True, timeout=300)
    assert "stopped: interrupted by SIGTERM 143" in done.stdout, done.stderr[-3000:]
