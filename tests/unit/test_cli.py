"""The ``rg-verl`` console command: subcommand help and ``train``'s config folders (``demo``: tests/unit/evaluation)."""

import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rg_verl import cli
from rg_verl.common.compose import resolve_config_dir
from rg_verl.grpo.cli import hydra_argv
from tests.helpers import REPO

RG_VERL = Path(sys.executable).parent / "rg-verl"


def rg_verl(*args: str, cwd: Path = REPO, stdin: str | None = None, timeout: int = 300, env: dict | None = None):
    assert RG_VERL.is_file(), f"{RG_VERL} is missing: run `pip install --no-deps -e .`"
    return subprocess.run([str(RG_VERL), *args], cwd=cwd, input=stdin, capture_output=True, text=True,
                          timeout=timeout, env=env)  # fmt: skip


# --- help of the console script -------------------------------------------------------------------


@pytest.mark.parametrize(
    "command, expected",
    [
        ("train", ["rg-verl train", "--config-path", "--config-name", "key=value", "+dry_run=true"]),
        ("evaluate", ["rg-verl evaluate", "--config", "--model-path", "--resume"]),
        ("convert", ["rg-verl convert", "checkpoint", "out_dir", "--dtype", "--keep-lora", "--verify"]),
        ("demo", ["rg-verl demo", "model_dir", "--max-tokens", "--temperature", "--system-prompt", ":item"]),
        ("export", ["rg-verl export", "--split", "--out", "--hf", "--limit"]),
        ("migrate-config", ["rg-verl migrate-config", "OLD.yaml", "--out", "--overwrite"]),
    ],
)
def test_each_subcommand_has_help_naming_it(command, expected, capsys):
    """In this process: each command's main(argv, prog) gets its name from the command table."""
    with pytest.raises(SystemExit) as done:
        cli.main([command, "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: {expected[0]}")
    for text in expected:
        assert text in out


def test_every_command_takes_its_name_from_the_table():
    for name in cli.COMMANDS:
        assert "prog" in inspect.signature(cli.command(name)).parameters, name


def test_the_command_lists_its_subcommands_and_rejects_others():
    proc = rg_verl("--help")
    assert proc.returncode == 0
    assert all(name in proc.stdout for name in ("train", "evaluate", "convert", "demo", "export", "migrate-config"))
    proc = rg_verl("fly")
    assert proc.returncode == 2 and "invalid choice: 'fly'" in proc.stderr
    assert rg_verl().returncode == 2


# --- train: config folders ------------------------------------------------------------------------


def test_a_relative_config_path_is_found_in_the_working_directory_then_the_repository(tmp_path):
    (tmp_path / "mine").mkdir()
    root = tmp_path / "repo"
    (root / "configs" / "smoke").mkdir(parents=True)
    (root / "configs" / "inter").mkdir()
    assert resolve_config_dir("mine", cwd=tmp_path, root=root) == str((tmp_path / "mine").resolve())
    assert resolve_config_dir("configs/inter", cwd=tmp_path, root=root) == str((root / "configs" / "inter").resolve())
    assert resolve_config_dir(None, cwd=tmp_path, root=root) == str(root / "configs" / "smoke")
    assert resolve_config_dir(str(tmp_path / "mine"), cwd=root, root=root) == str(tmp_path / "mine")
    assert resolve_config_dir("pkg://somewhere.conf", cwd=tmp_path, root=root) == "pkg://somewhere.conf"
    with pytest.raises(FileNotFoundError, match="'nowhere' not found"):
        resolve_config_dir("nowhere", cwd=tmp_path, root=root)
    with pytest.raises(FileNotFoundError, match="pass --config-path"):
        resolve_config_dir(None, cwd=tmp_path, root=tmp_path / "installed-without-configs")


def test_hydra_gets_an_absolute_config_path_and_every_other_argument_in_order():
    args = hydra_argv(["a=1", "--cfg", "job", "-cn", "learn", "+b=2", "-m", "--config-path=configs/smoke"])
    assert args[:4] == ["--config-path", str(REPO / "configs" / "smoke"), "--config-name", "learn"]
    assert args[4:] == ["--cfg", "job", "a=1", "+b=2", "-m", "hydra.job.name=train_grpo"]
    assert hydra_argv([])[:4] == ["--config-path", str(REPO / "configs" / "smoke"), "--config-name", "cpu"]
    # -c is Hydra's short --cfg, not an abbreviation of -cp or -cn
    assert hydra_argv(["-c", "job"])[4:6] == ["--cfg", "job"]


def test_train_with_a_missing_config_folder_is_a_usage_error(tmp_path):
    proc = rg_verl("train", "--config-path", "no/such/folder", cwd=tmp_path)
    assert proc.returncode == 2
    assert "config folder 'no/such/folder' not found" in proc.stderr


LOG_LINE = re.compile(r"^\[\d{4}-\d\d-\d\d [\d:,]+\]\[([\w.]+)\]\[(\w+)\] - (.*)$")


def printed(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if not LOG_LINE.match(line)]


def warned(stdout: str) -> list[str]:
    """The field each logged warning names."""
    matches = (LOG_LINE.match(line) for line in stdout.splitlines())
    return [m.group(3).split(":")[0] for m in matches if m and m.group(2) == "WARNING"]


def test_train_dry_run_prints_what_the_script_prints(tmp_path):
    args = [
        "--config-path", "configs/inter_generalisation", "--config-name", "algorithmic_qwen_3b", "+dry_run=true",
        f"actor_rollout_ref.model.path={tmp_path}",
    ]  # fmt: skip
    # as a run's processes: isomorphic_strings' items follow the hash seed (unset, the dry run says so)
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    cli = rg_verl("train", *args, f"hydra.run.dir={tmp_path / 'cli'}", env=env)
    script = subprocess.run(
        [sys.executable, str(REPO / "train_grpo.py"), *args, f"hydra.run.dir={tmp_path / 'script'}"],
        cwd=REPO, capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert cli.returncode == 0 and script.returncode == 0, cli.stderr[-2000:] + script.stderr[-2000:]
    assert "--- train[0] reasoning_gym/" in cli.stdout and "--- val[0] reasoning_gym/" in cli.stdout
    # log lines carry a timestamp, and the space estimates sample within a time budget: compare the rest
    assert printed(cli.stdout) == printed(script.stdout)
    assert warned(cli.stdout) == warned(script.stdout)
    assert (tmp_path / "cli" / "train_grpo.log").is_file()  # Hydra's job name is the script's


def test_train_dry_run_with_a_config_folder_relative_to_the_working_directory(tmp_path):
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "mine.yaml").write_text(
        "hydra:\n  searchpath: [pkg://verl.trainer.config, pkg://rg_verl.conf]\n"
        "defaults: [ppo_trainer, rg_verl_base, grpo_3b, _self_]\n"
        "reasoning_gym:\n  datasets:\n    leg_counting: {weight: 1.0}\n"
    )
    proc = rg_verl(
        "train", "--config-path", "experiments", "--config-name", "mine", "+dry_run=true",
        f"actor_rollout_ref.model.path={tmp_path}", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "--- train[0] reasoning_gym/leg_counting" in proc.stdout
