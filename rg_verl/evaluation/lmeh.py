"""lm-eval's Llama 3 MATH rule for the ``llama_math_algebra`` task (``evaluation/lmeh``; ``docs/evaluation.md``).

LaTeX is parsed with latex2sympy2_extended: sympy's parser needs an ANTLR runtime that omegaconf's pin excludes.
"""

from __future__ import annotations

import re
from typing import Any

from lm_eval.tasks.hendrycks_math.utils import last_boxed_only_string
from lm_eval.tasks.hendrycks_math.utils import remove_boxed as _lm_eval_remove_boxed

from rg_verl.reward.time_limit import Status, call_bounded

__all__ = [
    "EQUIV_TIMEOUT_S",
    "is_equiv",
    "last_boxed_only",
    "normalize_final_answer",
    "process_docs",
    "process_results",
    "remove_boxed",
]


EQUIV_TIMEOUT_S = 5.0

# ---- the Minerva normalization (Lewkowycz et al., 2022, appendix D), applied in this order

_REPLACEMENTS = (
    ("an ", ""),
    ("a ", ""),
    (".$", "$"),
    ("\\$", ""),
    ("\\ ", ""),
    (" ", ""),
    ("mbox", "text"),
    (",\\text{and}", ","),
    ("\\text{and}", ","),
    ("\\text{m}", "\\text{}"),
)

_DELETIONS = (
    "square", "ways", "integers", "dollars", "mph", "inches", "ft", "hours", "km", "units", "\\ldots",
    "sue", "points", "feet", "minutes", "digits", "cents", "degrees", "cm", "gm", "pounds", "meters",
    "meals", "edges", "students", "childrentickets", "multiples", "\\text{s}", "\\text{.}", "\\text{\ns}",
    "\\text{}^2", "\\text{}^3", "\\text{\n}", "\\text{}", "\\mathrm{th}", "^\\circ", "^{\\circ}", "\\;",
    ",\\!", "{,}", '"', "\\dots",
)  # fmt: skip

_REWRITES = tuple(
    (re.compile(pattern), replacement)
    for pattern, replacement in (
        (r"(.*?)(\$)(.*?)(\$)(.*)", r"$\3$"),
        (r"(\\text\{)(.*?)(\})", r"\2"),
        (r"(\\textbf\{)(.*?)(\})", r"\2"),
        (r"(\\overline\{)(.*?)(\})", r"\2"),
        (r"(\\boxed\{)(.*)(\})", r"\2"),
        (r"(frac)([^{])(.)", r"frac{\2}{\3}"),
        (r"(sqrt)([^{])", r"sqrt{\2}"),
    )
)


def normalize_final_answer(answer: str | None) -> str:
    """The Minerva normalization of a final answer (``"x = 10,000 \\text{ inches}"`` -> ``"10000"``; None -> "")."""
    if not answer:
        return ""
    answer = answer.split("=")[-1]
    for before, after in _REPLACEMENTS:
        answer = answer.replace(before, after)
    for text in _DELETIONS:
        answer = answer.replace(text, "")
    for pattern, replacement in _REWRITES:
        answer = pattern.sub(replacement, answer)
    answer = answer.replace("$", "")
    if answer.replace(",", "").isdigit():
        answer = answer.replace(",", "")
    return answer


# ---- the boxed answer: lm-eval's own finder (its minerva_math module cannot be imported beside omegaconf's ANTLR)
last_boxed_only = last_boxed_only_string


def remove_boxed(boxed: str | None) -> str:
    """lm-eval's ``remove_boxed``, but a box it cannot open (None, ``\\fbox{...}``) gives ``""`` instead of raising."""
    try:
        return _lm_eval_remove_boxed(boxed)
    except (AssertionError, TypeError):
        return ""


def _boxed_answer(text: str) -> str:
    return remove_boxed(last_boxed_only(text))


# ---- equivalence


def _difference_is_zero(first: str, second: str) -> bool:
    """Whether sympy simplifies ``first - second`` to zero (runs in a worker process)."""
    import sympy
    from latex2sympy2_extended import latex2sympy
    from latex2sympy2_extended.latex2sympy2 import ConversionConfig

    # read the LaTeX as written: no extra normalization, no mixed fractions, case kept
    config = ConversionConfig(
        interpret_as_mixed_fractions=False,
        interpret_simple_eq_as_assignment=False,
        interpret_contains_as_eq=False,
        lowercase_symbols=False,
    )
    try:
        parsed = [latex2sympy(s, normalization_config=None, conversion_config=config) for s in (first, second)]
        return bool(sympy.simplify(parsed[0] - parsed[1]) == 0)
    except Exception:  # an answer that does not parse, or two that cannot be subtracted, do not match
        return False


def is_equiv(first: str, second: str, timeout: float = EQUIV_TIMEOUT_S) -> bool:
    """Whether two normalized answers are equal for sympy; False when either does not parse or time runs out."""
    if not isinstance(first, str) or not isinstance(second, str) or not first or not second:
        return False
    value, status = call_bounded(_difference_is_zero, first, second, timeout=timeout, default=False)
    return status is Status.OK and value is True


# ---- lm-eval hooks (process_docs, process_results)


def _with_answer(doc: dict[str, Any]) -> dict[str, Any]:
    return {
        "problem": doc["problem"],
        "solution": doc["solution"],
        "answer": normalize_final_answer(_boxed_answer(doc["solution"])),
    }


def process_docs(dataset: Any) -> Any:
    """Adds ``answer`` to each MATH row (``problem``, ``solution``): its solution's normalized boxed answer."""
    return dataset.map(_with_answer)


def process_results(doc: dict[str, Any], results: list[str]) -> dict[str, int]:
    """``exact_match``: 1 when the response's last boxed answer equals the reference ``answer`` for sympy."""
    candidate = normalize_final_answer(normalize_final_answer(_boxed_answer(results[0])))
    return {"exact_match": int(is_equiv(candidate, doc["answer"]))}
