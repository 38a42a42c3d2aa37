"""rg_verl.final_answer: the reference conventions of GSM8K and MATH, shared by the data layer and the reward."""

import ast

from rg_verl.data.formats import gsm8k_entry, math_entry
from rg_verl.final_answer import gsm8k_reference, last_boxed
from rg_verl.reward import response_answer
from tests.helpers import REPO


def test_it_imports_nothing_of_rg_verl():
    """So the data layer and the reward can both import it without importing each other."""
    tree = ast.parse((REPO / "rg_verl" / "final_answer.py").read_text())
    imported = [
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    ]
    assert imported and not [name for name in imported if name.split(".")[0] == "rg_verl"]


def test_the_file_references_and_a_responses_box_follow_the_same_convention():
    solution = r"Half of 7 is $\frac{7}{2}$, so the answer is \boxed{\frac{7}{2}}."
    assert math_entry({"problem": "Halve 7.", "solution": solution}, 0)["answer"] == last_boxed(solution)
    assert response_answer(solution, "math/math") == last_boxed(solution) == r"\frac{7}{2}"
    gsm8k = gsm8k_entry({"question": "How many?", "answer": "2 + 1,000 = 1,002\n#### 1,002"}, 0)
    assert gsm8k["answer"] == gsm8k_reference("#### 1,002") == "1002"
