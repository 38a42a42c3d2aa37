"""rg-verl oreo: the two subcommands, each the code of its script."""

import subprocess
import sys

from rg_verl import cli
from rg_verl.oreo import cli as oreo_cli
from tests.helpers import REPO


def test_listed_in_rg_verl_and_usage_without_a_subcommand(capsys):
    assert "oreo" in cli.COMMANDS
    assert oreo_cli.main([]) == 2
    assert "collect" in capsys.readouterr().err
    assert oreo_cli.main(["--help"]) == 0


def test_subcommands_reach_their_scripts_code():
    for sub in ("collect", "train"):
        proc = subprocess.run([sys.executable, "-m", "rg_verl.cli", "oreo", sub, "--help"], cwd=REPO,
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert f"rg-verl oreo {sub}" in proc.stdout
