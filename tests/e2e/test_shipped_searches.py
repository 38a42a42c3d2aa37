"""The held-out searches shipped with the package cover every shipped config's validation split.

``rg_verl/data/shipped_searches`` says which candidate holds each validation item of the shipped configs
(``rg_verl.data.search_cache``), so a first run generates one candidate per item instead of about 20. These
tests fail when a shipped config changed without ``PYTHONHASHSEED=0 python utils/ship_searches.py``, or
when a shipped search disagrees with a fresh one. The check runs in a subprocess with ``PYTHONHASHSEED=0``,
as training runs do (``rg_verl.grpo.launch``): a few generators' items follow it.
"""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.test_shipped_configs import CONFIGS, config_id

REPO = Path(__file__).resolve().parents[2]
SEARCHING = [p for p in CONFIGS if p.parent.name != "math"]  # math/ reads files: nothing to search


def report(paths: list[str]) -> None:
    """Per config: candidates generated with the shipped searches, items and probes; probes searched afresh."""
    from unittest import mock

    from rg_verl.data import candidates
    from rg_verl.data.dataset import ReasoningGymDataset
    from tests.unit.test_shipped_configs import composed

    generated = []
    original = candidates.Candidates.item

    def counted(self, attempt, index):
        generated.append(self.name)
        return original(self, attempt, index)

    out = {}
    for path in paths:
        config = composed(Path(path))
        generated.clear()
        with mock.patch.object(candidates.Candidates, "item", counted):
            dataset = ReasoningGymDataset("reasoning_gym://val", None, config.data)
            hashes = [dataset[i]["extra_info"]["question_hash"] for i in range(len(dataset))]
        probes = {name: probe and probe["question"] for name, probe in dataset.probes.items()}
        with mock.patch.dict(os.environ, {"RG_VERL_SEARCH_CACHE": "off"}):
            fresh = ReasoningGymDataset("reasoning_gym://val", None, config.data)
        out[path] = {
            "generated": len(generated),
            # one candidate per probe of a generator in the share, and per item but item 0 (a probe)
            "one_each": len(dataset.probes) - len(dataset.unreachable) + len(dataset) - 1,
            "items": len(hashes),
            "probes_match": probes == {name: probe and probe["question"] for name, probe in fresh.probes.items()},
        }
    print(json.dumps(out))


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    env = {**os.environ, "PYTHONHASHSEED": "0", "RG_VERL_SEARCH_CACHE": str(tmp_path_factory.mktemp("searches"))}
    code = f"from tests.e2e.test_shipped_searches import report; report({[str(p) for p in SEARCHING]!r})"
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=1800
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("path", SEARCHING, ids=config_id)
def test_a_shipped_configs_validation_split_costs_one_candidate_per_item(path, reports):
    found = reports[str(path)]
    assert found["generated"] == found["one_each"], (
        f"{config_id(path)}: {found['generated']} candidates for {found['items']} validation items; the "
        "shipped searches are out of date: run PYTHONHASHSEED=0 python utils/ship_searches.py"
    )
    assert found["probes_match"], f"{config_id(path)}: a shipped search disagrees with a fresh one"


def test_the_script_searches_every_config_the_tests_check():
    spec = importlib.util.spec_from_file_location("ship_searches", REPO / "utils" / "ship_searches.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.shipped_configs() == CONFIGS
