"""Mathematical answer equivalence with math-verify, under a hard time limit.

:func:`math_equal` parses the model's answer and the reference with
``math_verify.parse`` and compares them with ``math_verify.verify``, in a worker
process of :mod:`rg_verl.reward.time_limit` (math-verify's own ``signal.alarm`` timeouts are
disabled: they only work in a main thread and have one-second granularity). Hostile
answers such as ``\\boxed{9^{9^{9^{9}}}}`` are cut off after ``timeout`` seconds and
score 0; answers longer than :data:`MAX_ANSWER_CHARS` score 0 without being parsed.

Model output is never evaluated as Python: math-verify parses LaTeX with its own
grammar, and hands sympy's ``parse_expr`` only strings its regex restricts to digits,
operators and parentheses.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from rg_verl.reward.time_limit import Status, call_bounded

__all__ = ["MAX_ANSWER_CHARS", "gsm8k_reference", "last_boxed", "math_equal", "math_equal_status"]

logger = logging.getLogger(__name__)

#: Longest model answer (characters) worth parsing; longer ones score 0 without parsing.
MAX_ANSWER_CHARS = 10_000

_BOXED, _FBOX = "\\boxed", "\\fbox"
_DELIMITERS = ("$", "\\boxed", "\\fbox", "\\(", "\\[", "\\begin{")
# A word of 3+ letters that is not a LaTeX command: the answer is prose.
_PROSE_WORD = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{3,}")
# Plain-text (sympy/calculator style) names that LaTeX writes as commands.
_PLAIN_FUNCS = re.compile(
    r"(?<![\\A-Za-z])(arcsin|arccos|arctan|sinh|cosh|tanh|sin|cos|tan|cot|sec|csc|log|ln|exp|pi)(?![A-Za-z])"
)
_PLAIN_INF = re.compile(r"(?<![\\A-Za-z])(?:infinity|inf|oo)(?![A-Za-z])")
_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ@")


# --- text helpers ----------------------------------------------------------------------------


def _braced(text: str, start: int) -> str | None:
    """Content of the group opening at ``text[start] == "{"``, or None if unbalanced."""
    depth = 0
    for i in range(start, len(text)):
        c = text[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1 : i]
    return None


def _after_command(text: str, end: int) -> str | None:
    """The argument of the command ending at ``end``, or None if there is none."""
    i = end
    n = len(text)
    while i < n and text[i].isspace():
        i += 1
    if i >= n:
        return None
    if text[i] == "{":
        return _braced(text, i)
    if i == end:  # "\boxed5": a single-character argument
        return text[i] if not text[i].isspace() else None
    # "\boxed 12": the token up to whitespace or "$"
    j = i
    while j < n and not text[j].isspace() and text[j] != "$":
        j += 1
    return text[i:j] or None


def last_boxed(text: Any) -> str | None:
    """Content of the last ``\\boxed{...}`` (else the last ``\\fbox{...}``) in ``text``.

    Braces are counted literally (as in the MATH reference ``last_boxed_only_string``),
    so ``\\boxed{\\{1,2\\}}`` gives ``\\{1,2\\}``. ``\\boxed 5`` and ``\\boxed5`` give
    ``5``. Returns None if there is no box, or the last one is not closed (e.g. a
    truncated response). Linear time; never raises.

    Examples:
        >>> last_boxed(r"so \\boxed{1} or rather \\boxed{\\frac{1}{2}}.")
        '\\\\frac{1}{2}'
        >>> last_boxed(r"\\boxed{12") is None
        True
    """
    if not isinstance(text, str):
        return None
    for command in (_BOXED, _FBOX):
        end = len(text)
        while True:
            idx = text.rfind(command, 0, end)
            if idx < 0:
                break
            after = idx + len(command)
            if after < len(text) and text[after] in _LETTERS:
                end = idx  # another command, e.g. \boxedfoo: look further left
                continue
            return _after_command(text, after)
    return None


def gsm8k_reference(answer_text: Any) -> str:
    """The final answer of a GSM8K reference solution: the text after the last
    ``####``, stripped, with thousands separators removed (``"... #### 1,234"`` ->
    ``"1234"``). Without ``####`` the whole text is used. Never raises."""
    text = answer_text if isinstance(answer_text, str) else str(answer_text)
    if "####" in text:
        text = text.rsplit("####", 1)[1]
    return text.strip().replace(",", "")


# --- parsing (runs in the worker) ------------------------------------------------------------


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
        # Already delimited (``$..$``, ``\boxed{..}``, ...): math-verify's own extraction.
        return parse(s, both, parsing_timeout=None)
    bare = s
    if "\\" not in s:
        bare = _plain_to_latex(s)
        if _PROSE_WORD.search(bare):
            # Prose such as "The answer is 5": extract the number/expression from it.
            found = parse(s, both, parsing_timeout=None)
            if found:
                return found
    # A bare answer ("1/2", "0.5", "\frac12", "x^2+1", "(1, 2)", "2*sqrt(3)"): read it
    # as LaTeX, falling back to plain-expression extraction ("50%", "1/2.").
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


# --- public API ------------------------------------------------------------------------------


def math_equal_status(
    answer: Any, gold: Any, timeout: float = 1.0, max_chars: int = MAX_ANSWER_CHARS
) -> tuple[float, Status]:
    """Like :func:`math_equal`, also returning how the check ended (``"ok"``,
    ``"timeout"`` or ``"error"``; answers rejected without parsing are ``"ok"``)."""
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
    """1.0 if ``answer`` is mathematically equivalent to ``gold`` per math-verify, else 0.0.

    Args:
        answer: The model's answer (untrusted): bare (``1/2``, ``\\frac12``) or
            delimited (``$...$``, ``\\boxed{...}``); prose is tolerated
            (``The answer is 5``).
        gold: The reference, plain (``0.5``, ``1/2``) or LaTeX (``\\frac{1}{2}``,
            ``\\boxed{...}``).
        timeout: Hard limit in seconds for parsing and comparing (the worker is
            killed when it is exceeded; the result is then 0.0).
        max_chars: Longer answers score 0.0 without being parsed.

    Never raises; non-string inputs score 0.0.

    Examples:
        >>> math_equal(r"\\boxed{\\dfrac12}", "0.5")
        1.0
        >>> math_equal("2", "3")
        0.0
    """
    return math_equal_status(answer, gold, timeout=timeout, max_chars=max_chars)[0]
