"""The install sets resolve: the GPU set (requirements-gpu.txt) with pip's own resolver, without installing it.

A pin that conflicts with another (requirements.txt's torch 2.13.0 beside verl's torch 2.11.0, say) makes pip
answer ``ResolutionImpossible`` here, on a machine without a GPU. The resolver reads package metadata from the
package index (PyPI serves it apart from the wheels), so this needs the index, as ``make install`` does.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tests.helpers import REPO

pytestmark = pytest.mark.slow

# verl 0.9.1's GPU recipe (its `vllm` extra), which requirements-gpu.txt must resolve to
GPU_PINS = {"torch": "2.11.0", "vllm": "0.24.0", "transformers": "5.9.0", "verl": "0.9.1"}
FLASH_ATTN = "pip install flash-attn==2.8.3 --no-build-isolation"


def resolve(requirements: str, tmp_path) -> dict[str, str]:
    """name -> version of what ``pip install -r requirements`` would install into an empty environment."""
    report = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--report",
         str(report), "-r", str(REPO / requirements)],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, f"{requirements} does not resolve:\n{proc.stderr[-3000:]}"
    installs = json.loads(report.read_text())["install"]
    return {item["metadata"]["name"].lower(): item["metadata"]["version"] for item in installs}


def test_the_gpu_set_resolves_to_verls_gpu_pins(tmp_path):
    versions = resolve("requirements-gpu.txt", tmp_path)
    for name, version in GPU_PINS.items():
        assert versions.get(name, "").split("+")[0] == version, (name, versions.get(name))
    assert "flash-attn" not in versions  # its own step, after torch (see the README)


def test_the_readme_installs_the_gpu_set_and_flash_attention_apart():
    readme = (REPO / "README.md").read_text()
    block = re.search(r"```bash\n(pip install -r requirements-gpu\.txt\n.*?)```", readme, re.S)
    assert block, "the README has no GPU install block"
    assert block.group(1).splitlines() == [
        "pip install -r requirements-gpu.txt", FLASH_ATTN, "pip install --no-deps -e ."
    ]
    assert FLASH_ATTN in (REPO / "requirements-gpu.txt").read_text()
