"""Tests of evaluation/lmeh: the lm-evaluation-harness tasks' scoring, and their YAML (the run itself: tests/e2e)."""

from __future__ import annotations

import importlib.util

import pytest
from reasoning_gym.utils import SYSTEM_PROMPTS

from tests.helpers import REPO

LMEH = REPO / "evaluation" / "lmeh"


def lmeh_utils():
    spec = importlib.util.spec_from_file_location("rg_verl_lmeh_utils", LMEH / "utils.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_lmeh_scoring_strict_and_flexible():
    utils = lmeh_utils()
    doc = {"question": "q", "answer": "2 + 3 = 5\n#### 1,005"}
    assert utils.gsm8k_target(doc) == "1005"
    table = {
        "<think>sum</think><answer>1005</answer>": (1.0, 1.0),
        "<answer>1,005</answer>": (1.0, 1.0),
        "so it is \\boxed{1005}": (0.0, 1.0),
        "the total is 1,005.": (0.0, 1.0),
        "<answer>7</answer> and 1005": (0.0, 0.0),
        "no idea": (0.0, 0.0),
    }
    for response, (strict, flexible) in table.items():
        scores = utils.process_gsm8k(doc, [response])
        assert (scores["exact_match"], scores["exact_match_flexible"]) == (strict, flexible), response
    math_doc = {"problem": "p", "solution": "Thus $x = \\boxed{\\frac{1}{2}}$."}
    assert utils.math_target(math_doc) == "\\frac{1}{2}"
    assert utils.process_math(math_doc, ["<answer>0.5</answer>"]) == {"exact_match": 1.0, "exact_match_flexible": 1.0}
    assert utils.process_math(math_doc, ["$\\boxed{1/2}$"])["exact_match_flexible"] == 1.0


def test_lmeh_tasks_load_in_the_task_manager():
    pytest.importorskip("lm_eval")
    import yaml
    from lm_eval.tasks import TaskManager

    manager = TaskManager(include_path=str(LMEH), include_defaults=False)
    assert {"gsm8k_rg_verl", "math_algebra_rg_verl"} <= set(manager.all_tasks)

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_constructor("!function", lambda loader, node: node.value)
    for name in ("gsm8k_rg_verl", "math_algebra_rg_verl"):
        task = yaml.load((LMEH / f"{name}.yaml").read_text(), Loader=Loader)
        assert task["description"] == SYSTEM_PROMPTS["default"]  # the prompt rg-verl trains with
