"""``rg-verl compare --fresh``: the last comparison's folder goes, anything else stays and is named."""

from __future__ import annotations

import pytest

from rg_verl.common.schema import ConfigError
from rg_verl.compare.cli import clear, main
from tests.helpers import REPO


def test_fresh_deletes_an_earlier_comparisons_folder(tmp_path):
    out = tmp_path / "demo"
    (out / "logs").mkdir(parents=True)
    (out / "logs" / "grpo_train.done").write_text("")
    (out / "grpo").mkdir()
    clear(out)
    assert not out.exists()
    clear(out)  # nothing there: nothing to do


@pytest.mark.parametrize("kind", ["folder", "file"])
def test_fresh_refuses_what_is_not_a_comparisons_folder(tmp_path, kind):
    out = tmp_path / "mine"
    if kind == "folder":
        out.mkdir()
        (out / "notes.txt").write_text("keep me")
    else:
        out.write_text("keep me")
    with pytest.raises(ConfigError, match=r"out: --fresh .* is not one \(it has no logs/\)"):
        clear(out)
    assert out.exists()


def test_fresh_on_a_foreign_folder_is_a_config_error_before_any_stage(tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    config = str(REPO / "configs" / "compare" / "demo_cpu.yaml")
    assert main(["--config", config, "--fresh", f"out={out}"]) == 2
    assert "config error: out: --fresh" in capsys.readouterr().err
    assert list(out.iterdir()) == []


def test_a_yaml_syntax_error_is_one_line_naming_file_line_and_column(tmp_path, capsys):
    config = tmp_path / "compare.yaml"
    config.write_text("budget: 64\nmethods: [grpo, oreo\nout: x\n")
    assert main(["--config", str(config)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"{config}:3:4: expected ',' or ']', but got ':' (while parsing a flow sequence that began at 2:10)"
    ]
