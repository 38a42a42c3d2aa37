"""The shipped list of reasoning-gym's reference questions holds a fresh sample of them
(utils/ship_reference_questions.py regenerated in a process of its own, PYTHONHASHSEED=0)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from rg_verl.data import reference_questions
from rg_verl.data.reference_questions import LIST_FILE
from tests.helpers import REPO
from tests.unit.data.test_reference_questions import SAMPLE_ITEMS, SCRIPT, SLOW_GENERATORS

pytestmark = pytest.mark.slow


def test_shipped_list_holds_a_fresh_sample_of_the_reference_items(tmp_path):
    """Regenerates the first items of every shipped entry but the slow generators, as the script does
    (PYTHONHASHSEED=0), and finds each question in the shipped list: about 20 s on 2 cores."""
    code = (
        "import json, sys, importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('ship', {str(SCRIPT)!r})\n"
        "ship = importlib.util.module_from_spec(spec); spec.loader.exec_module(ship)\n"
        f"skip = {sorted(SLOW_GENERATORS)!r}\n"
        "entries = [(n, p, s, min(z, %d)) for n, p, s, z in ship.shipped_entries() if n not in skip]\n"
        "print(json.dumps({'entries': len(ship.distinct_entries(entries)),"
        " 'hashes': sorted(ship.question_hashes(entries))}))\n"
    ) % SAMPLE_ITEMS
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    sample = json.loads(done.stdout.splitlines()[-1])
    missing = set(sample["hashes"]) - reference_questions.shipped_hashes()
    assert sample["entries"] > 50 and len(sample["hashes"]) > 1000
    assert not missing, (
        f"{len(missing)} reference questions are not in {LIST_FILE.name}: "
        "run PYTHONHASHSEED=0 python utils/ship_reference_questions.py, then utils/ship_searches.py"
    )
