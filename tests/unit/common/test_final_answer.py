"""rg_verl.common.final_answer: the reference conventions of GSM8K and MATH, shared by the data layer and the reward."""

import ast

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from rg_verl.common.final_answer import gsm8k_reference, last_boxed
from rg_verl.data.formats import gsm8k_entry, math_entry
from rg_verl.reward import response_answer
from tests.helpers import REPO, within


def test_it_imports_nothing_of_rg_verl():
    """So the data layer and the reward can both import it without importing each other."""
    tree = ast.parse((REPO / "rg_verl" / "common" / "final_answer.py").read_text())
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


# --- last_boxed ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        (r"\boxed{5}", "5"),
        (r"first \boxed{1} then \boxed{\frac{1}{2}}.", r"\frac{1}{2}"),
        (r"\boxed{\{1,2\}}", r"\{1,2\}"),
        (r"$\boxed{ x^{2} }$", " x^{2} "),
        (r"\boxed 12 apples", "12"),
        (r"\boxed5", "5"),
        (r"\boxed {7}", "7"),
        (r"\fbox{3}", "3"),
        (r"\fbox{3} \boxed{4}", "4"),
        (r"\boxed{1} \boxedfoo{2}", "1"),
        (r"\boxed{\boxed{8}}", "8"),
        (r"\boxed{1} and a cut-off \boxed{12", None),
        (r"\boxed", None),
        ("no box", None),
        ("", None),
        (None, None),
    ],
)
def test_last_boxed(text, expected):
    assert last_boxed(text) == expected


_plain = st.text(alphabet=st.characters(blacklist_characters="{}"), max_size=12)
_balanced = st.recursive(
    _plain,
    lambda inner: st.lists(st.one_of(inner, inner.map(lambda s: "{" + s + "}")), max_size=4).map("".join),
    max_leaves=12,
)


@given(prefix=st.text(max_size=30), inner=_balanced, suffix=st.text(max_size=30))
def test_last_boxed_returns_balanced_content(prefix, inner, suffix):
    assume("\\boxed" not in inner and "\\boxed" not in suffix)
    assert last_boxed(prefix + r"\boxed{" + inner + "}" + suffix) == inner


_pieces = st.one_of(st.sampled_from(["{", "}", "\\", "\\boxed", "\\fbox", " ", "\n", "x", "1", "$"]), st.characters())


@given(st.lists(_pieces, max_size=40).map("".join))
def test_last_boxed_never_raises(text):
    result = last_boxed(text)
    assert result is None or isinstance(result, str)


@pytest.mark.parametrize(
    "text",
    [
        "\\boxed{" * 200_000,
        "\\boxed{" + "{" * 1_000_000,
        "\\boxedx" * 200_000,
        "\\boxed " + "9" * 1_000_000,
    ],
)
def test_last_boxed_finishes_on_long_hostile_text(text):
    # linear scans take milliseconds here; a quadratic one would take hours: a deadline, not a timing
    within(30, last_boxed, text)


# --- gsm8k_reference -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Natalia sold 48/2 = 24 clips.\n#### 72", "72"),
        ("so 1,000 + 234 = 1,234\n#### 1,234", "1234"),
        ("#### -3.5 ", "-3.5"),
        ("a #### 1\n#### 2", "2"),
        ("42", "42"),
    ],
)
def test_gsm8k_reference(text, expected):
    assert gsm8k_reference(text) == expected
