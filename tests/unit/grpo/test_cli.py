"""rg_verl.grpo.cli: ``train_grpo.py`` and ``rg-verl train`` read the config's YAML files before Hydra starts, so a
syntax error is one line, ``file:line:column: what is wrong``, instead of Hydra's traceback of its loader."""

import subprocess
import sys

import pytest

from tests.helpers import REPO

COMMANDS = {"train_grpo.py": [sys.executable, str(REPO / "train_grpo.py")],
            "rg-verl train": [sys.executable, "-m", "rg_verl.cli", "train"]}  # fmt: skip


def write_configs(folder):
    """``broken.yaml``, whose flow list is not closed, and ``main.yaml``, whose defaults list loads a layer with a bad
    indent: what each one's error says."""
    (folder / "broken.yaml").write_text("trainer:\n  total_training_steps: 3\n  logger: [console\nfoo: bar\n")
    (folder / "main.yaml").write_text("defaults:\n  - _layer\n  - _self_\nfoo: 1\n")
    (folder / "_layer.yaml").write_text("a: 1\nb:\n c: 2\n  d: 3\n")
    return {
        "broken": f"{folder / 'broken.yaml'}:4:4: expected ',' or ']', but got ':' (while parsing a flow sequence "
                  "that began at 3:11)",
        "main": f"{folder / '_layer.yaml'}:4:4: mapping values are not allowed here",
    }  # fmt: skip


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("name", ["broken", "main"], ids=["the primary config", "a file of its defaults list"])
def test_a_yaml_syntax_error_is_one_line_naming_file_line_and_column(tmp_path, command, name):
    line = write_configs(tmp_path)[name]
    proc = subprocess.run([*COMMANDS[command], "--config-path", str(tmp_path), "--config-name", name, "x=1"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [line]
    assert proc.stdout == ""
