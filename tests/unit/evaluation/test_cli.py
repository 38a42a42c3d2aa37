"""rg_verl.evaluation.cli: ``evaluation/evaluate_model.py`` names a YAML syntax error in one line,
``file:line:column: what is wrong``."""

import subprocess
import sys

from rg_verl.evaluation.cli import main
from tests.helpers import REPO

BROKEN = "model_path: x\ncategories:\n  - category: a\n    datasets: [{dataset: chain_sum, size: 3}\n"


def test_a_yaml_syntax_error_is_one_line_naming_file_line_and_column(tmp_path):
    (tmp_path / "eval.yaml").write_text(BROKEN)
    proc = subprocess.run([sys.executable, str(REPO / "evaluation" / "evaluate_model.py"), "--config", "eval.yaml"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [  # the file as the YAML reader opened it: absolute
        f"{tmp_path / 'eval.yaml'}:5:1: expected ',' or ']', but got '<stream end>' (while parsing a flow sequence "
        "that began at 4:15)"
    ]


def test_rg_verl_evaluate_says_the_same(tmp_path, capsys):
    (tmp_path / "eval.yaml").write_text("max_tokens: 8\nmax_tokens: 9\n")
    assert main(["--config", str(tmp_path / "eval.yaml")], prog="rg-verl evaluate") == 2
    assert capsys.readouterr().err.splitlines() == [
        f"{tmp_path / 'eval.yaml'}:2:1: found duplicate key max_tokens (while constructing a mapping that began at 1:1)"
    ]
