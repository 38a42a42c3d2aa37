"""trainer.console: the mode, the progress line, and the console a run shows (in a subprocess, since the
redirection moves the process's own file descriptors 1 and 2, where pytest captures)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from hypothesis import given
from hypothesis import strategies as st
from omegaconf import OmegaConf

from rg_verl.common.schema import ConfigError
from rg_verl.grpo.console import MARK, console_mode, progress_line, progress_text


def config(mode: str | None, out: str = "/tmp") -> OmegaConf:
    trainer = {"default_local_dir": out} if mode is None else {"console": mode, "default_local_dir": out}
    return OmegaConf.create({"trainer": trainer})


@pytest.mark.parametrize(
    ("mode", "isatty", "expected"),
    [("auto", True, "progress"), ("auto", False, "full"), (None, True, "progress"), ("progress", False, "progress"),
     ("full", True, "full")],
)  # fmt: skip
def test_the_mode_follows_the_setting_and_auto_follows_the_terminal(mode, isatty, expected):
    assert console_mode(config(mode), isatty=isatty) == expected


def test_an_unknown_mode_names_the_field_and_the_choices():
    with pytest.raises(ConfigError, match=r"trainer.console: 'quiet' is not one of auto, progress, full"):
        console_mode(config("quiet"))


def test_the_progress_line_says_step_reward_accuracy_speed_and_time_left():
    line = progress_line(4, 50, -0.05, 0.25, 2.94, 3725.4)
    assert line == f"{MARK} step 4/50  reward -0.050  accuracy 0.250  2.9 s/step  1:02:05 left"
    assert "accuracy n/a" in progress_line(1, 2, 0.0, None, 1.0, 1.0)


@given(st.text())
def test_a_line_without_the_mark_is_not_shown(text):
    if MARK not in text:
        assert progress_text(text) is None


@given(st.integers(1, 10_000), st.floats(-10, 10), st.floats(0, 1), st.floats(0, 1e4))
def test_a_progress_line_forwarded_by_ray_is_shown_as_printed(step, reward, accuracy, seconds):
    line = progress_line(step, 10_000, reward, accuracy, seconds, seconds * 3)
    forwarded = f"\x1b[36m(TaskRunnerV1 pid=9709)\x1b[0m {line}  "
    assert progress_text(forwarded) == line


RUN = """
import subprocess, sys
from omegaconf import OmegaConf
from rg_verl.grpo.console import quiet_console

config = OmegaConf.create({"trainer": {"console": "progress", "default_local_dir": sys.argv[1]}})
with quiet_console(config):
    print("verl's noise", flush=True)
    print("[rg-verl] step 1/2  reward 0.500", flush=True)
    subprocess.run([sys.executable, "-c", "import sys; print('a worker'); print('stderr noise', file=sys.stderr)"])
    print("\\x1b[36m(TaskRunnerV1 pid=1)\\x1b[0m [rg-verl] step 2/2  reward 1.000", file=sys.stderr, flush=True)
    if sys.argv[2] == "fail":
        raise ValueError("the reward worker is gone")
"""


def run(tmp_path, outcome: str) -> tuple[subprocess.CompletedProcess, str]:
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent(RUN))
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "out"), outcome], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    [log] = (tmp_path / "out" / "logs").glob("train-*.log")
    return proc, log.read_text()


def test_the_console_shows_the_log_path_and_the_progress_lines_and_the_log_holds_everything(tmp_path):
    proc, log = run(tmp_path, "succeed")
    assert proc.returncode == 0, proc.stderr
    [log_path] = (tmp_path / "out" / "logs").glob("train-*.log")
    assert proc.stdout.splitlines() == [
        f"{MARK} verl's and Ray's logs: {log_path} (trainer.console=full shows them here)",
        f"{MARK} step 1/2  reward 0.500",
        f"{MARK} step 2/2  reward 1.000",
        f"{MARK} the run finished; the full log: {log_path}",
    ]
    assert proc.stderr == ""
    for text in ("verl's noise", "a worker", "stderr noise", "step 1/2", "(TaskRunnerV1 pid=1)"):
        assert text in log


def test_a_failed_run_prints_the_error_and_the_log_and_logs_the_traceback(tmp_path):
    proc, log = run(tmp_path, "fail")
    [log_path] = (tmp_path / "out" / "logs").glob("train-*.log")
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        f"{MARK} the run failed: ValueError: the reward worker is gone",
        f"{MARK} the full log: {log_path}",
    ]
    assert "Traceback" in log and 'raise ValueError("the reward worker is gone")' in log
    assert "the run finished" not in proc.stdout
