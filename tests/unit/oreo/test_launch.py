"""train_oreo.py's launcher: a bad config stops before the device or any model, with one line."""

import os
import subprocess
import sys

from tests.helpers import REPO


def run(*args, cwd):
    env = {**os.environ, "RG_VERL_OUTPUT": str(cwd / "outputs")}
    return subprocess.run([sys.executable, str(REPO / "train_oreo.py"), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def test_missing_trajectories_name_the_collect_command(tmp_path, tiny_model):
    proc = run(f"actor.model.path={tiny_model}", cwd=tmp_path)
    assert proc.returncode == 1
    assert "Invalid config: data.train_files[0]" in proc.stderr and "rg-verl oreo collect" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_bad_field_is_named(tmp_path, tiny_model):
    proc = run(f"actor.model.path={tiny_model}", "oreo.variant=sentence", cwd=tmp_path)
    assert proc.returncode == 1 and "oreo.variant" in proc.stderr


def test_rg_verl_oreo_train_takes_the_same_arguments(tmp_path, tiny_model):
    env = {**os.environ, "RG_VERL_OUTPUT": str(tmp_path / "outputs")}
    proc = subprocess.run([sys.executable, "-m", "rg_verl.cli", "oreo", "train", f"actor.model.path={tiny_model}"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 1 and "Invalid config: data.train_files[0]" in proc.stderr


def test_a_yaml_syntax_error_is_one_line_naming_file_line_and_column(tmp_path):
    """Checked before Hydra starts: Hydra would print a traceback of its loader."""
    (tmp_path / "main.yaml").write_text("defaults:\n  - _layer\n  - _self_\nfoo: 1\n")
    (tmp_path / "_layer.yaml").write_text("a: 1\nb:\n c: 2\n  d: 3\n")
    line = f"{tmp_path / '_layer.yaml'}:4:4: mapping values are not allowed here"
    proc = run("--config-path", str(tmp_path), "--config-name", "main", cwd=tmp_path)
    assert proc.returncode == 1 and proc.stderr.splitlines() == [line]
    command = [sys.executable, "-m", "rg_verl.cli", "oreo", "train", "--config-path", str(tmp_path), "--config-name",
               "main"]  # fmt: skip
    proc = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and proc.stderr.splitlines() == [line]
