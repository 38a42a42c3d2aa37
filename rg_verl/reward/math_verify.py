"""Answer equivalence with math-verify in a :mod:`rg_verl.reward.time_limit` worker (its alarm needs a main thread)."""

from __future__ import annotations

import logging
import re
from typing import Any

from rg_verl.reward.time_limit import Status, call_bounded

__all__ = ["MAX_ANSWER_CHARS", "math_equal", "math_equal_status"]

logger = logging.getLogger(__name__)

MAX_ANSWER_CHARS = 10_000

_DELIMITERS = ("$", "\\boxed", "\\fbox", "\\(", "\\[", "\\begin{")
_PROSE_WORD = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{3,}")
# sympy/calculator names that LaTeX writes as commands
_PLAIN_FUNCS = re.compile(
    r"(?<![\\A-Za-z])(arcsin|arccos|arctan|sinh|cosh|tanh|sin|cos|tan|cot|sec|csc|log|ln|exp|pi)(?![A-Za-z])"
)
_PLAIN_INF = re.compile(r"(?<![\\A-Za-z])(?:infinity|inf|oo)(?![A-Za-z])")



def _sqrt_to_latex(s: str) -> str:
    """``sqrt(x+1)`` -> ``\\sqrt{x+1}`` (balanced parentheses, one linear pass)."""
    if "sqrt" not in s:
        return s
    out: list[str] = []
    stack: list[bool] = []  # for each open "(": whether it opened a sqrt
    i, n = 0, len(s)
    while i < n:
        if s.startswith("sqrt", i) and (i == 0 or not s[i - 1].isalpha()):
            j = i + 4
            while j < n and s[j] == " ":
                j += 1
            if j < n and s[j] == "(":
                out.append("\\sqrt{")
                stack.append(True)
                i = j + 1
                continue
        c = s[i]
        if c == "(":
            stack.append(False)
        elif c == ")" and stack and stack.pop():
            c = "}"
        out.append(c)
        i += 1
    return "".join(out)


def _plain_to_latex(s: str) -> str:
    """Rewrites plain-text math (``2*sqrt(3)``, ``x**2``, ``log(8)``, ``oo``) as LaTeX."""
    s = _sqrt_to_latex(s.replace("**", "^"))
    s = _PLAIN_INF.sub(lambda m: "\\infty", s)
    return _PLAIN_FUNCS.sub(lambda m: "\\" + m.group(1), s)


_quiet = False


def _parse(text: str) -> list:
    """math-verify parse of an answer or a reference written with or without delimiters."""
    global _quiet
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse

    if not _quiet:  # "timeout disabled" warnings: the worker's hard limit applies instead
        logging.getLogger("math_verify").setLevel(logging.ERROR)
        _quiet = True
    s = text.strip()
    if not s:
        return []
    both = [LatexExtractionConfig(), ExprExtractionConfig()]
    if any(d in s.replace("\\$", "") for d in _DELIMITERS):  # "\$18" is a currency sign
        return parse(s, both, parsing_timeout=None)
    bare = s
    if "\\" not in s:
        bare = _plain_to_latex(s)
        if _PROSE_WORD.search(bare):
            found = parse(s, both, parsing_timeout=None)
            if found:
                return found
    # a bare answer ("1/2", "\frac12", "2*sqrt(3)") as LaTeX, else as a plain expression ("50%", "1/2.")
    found = parse(f"${bare}$", [LatexExtractionConfig()], parsing_timeout=None, fallback_mode="no_fallback")
    if found:
        return found
    return parse(s, [ExprExtractionConfig()], parsing_timeout=None)


def _math_equal_worker(answer: str, gold: str) -> float:
    from math_verify import verify

    gold_parsed = _parse(gold)
    if not gold_parsed:
        return 0.0
    answer_parsed = _parse(answer)
    if not answer_parsed:
        return 0.0
    return 1.0 if verify(gold_parsed, answer_parsed, timeout_seconds=None) else 0.0



def math_equal_status(
    answer: Any, gold: Any, timeout: float = 1.0, max_chars: int = MAX_ANSWER_CHARS
) -> tuple[float, Status]:
    """:func:`math_equal` and how it ended: ``"ok"`` (answers refused unparsed too), ``"timeout"`` or ``"error"``."""
    try:
        if not isinstance(answer, str) or not isinstance(gold, str):
            return 0.0, Status.OK
        if len(answer) > max_chars or not answer.strip() or not gold.strip():
            return 0.0, Status.OK
        if answer.strip() == gold.strip():
            return 1.0, Status.OK
        value, status = call_bounded(_math_equal_worker, answer, gold, timeout=timeout, default=0.0)
        return (1.0 if status is Status.OK and value == 1.0 else 0.0), status
    except Exception as e:  # never raise into the reward loop
        logger.warning("math_equal failed: %r", e)
        return 0.0, Status.ERROR


def math_equal(answer: Any, gold: Any, timeout: float = 1.0, max_chars: int = MAX_ANSWER_CHARS) -> float:
    """1.0 if ``answer`` is mathematically equivalent to ``gold`` per math-verify, else 0.0."""
    return math_equal_status(answer, gold, timeout=timeout, max_chars=max_chars)[0]
