"""Which answers may reach ``sympy.parse_expr`` (it evaluates its input as Python): plain arithmetic only."""

import builtins
import keyword
import re

# reasoning-gym datasets whose score_answer runs sympy.parse_expr on the answer
SYMPY_PARSED = frozenset(
    {"simple_integration", "intermediate_integration", "polynomial_multiplication", "puzzle24", "countdown"}
)

# names a math answer may use beyond short variable names
MATH_NAMES = frozenset(
    """sin cos tan cot sec csc asin acos atan acot asec acsc sinh cosh tanh coth asinh acosh atanh
    exp log ln sqrt cbrt root pi oo E I abs Abs sign factorial floor ceiling Rational binomial gamma erf
    Integral""".split()
)

_ALLOWED_CHARS = re.compile(r"[0-9A-Za-z+\-*/^().,=<>!%| \t\n]*")
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9]*")
_UNSAFE_SHORT = frozenset(name for name in dir(builtins) if len(name) <= 3) | frozenset(keyword.kwlist)


def is_plain_expression(answer: str, max_chars: int = 2000) -> bool:
    """Whether ``answer`` is plain arithmetic that is safe to give ``sympy.parse_expr``.

    >>> is_plain_expression("3*x**2 + sin(x)/2 + C")
    True
    >>> is_plain_expression("3*Integral(x*cos(2*x), x) + C")  # intermediate_integration's unevaluated answers
    True
    >>> is_plain_expression("__import__('os').system('ls')"), is_plain_expression("x.conjugate()")
    (False, False)
    """
    if not isinstance(answer, str) or len(answer) > max_chars or not _ALLOWED_CHARS.fullmatch(answer):
        return False
    if re.search(r"\.\s*[A-Za-z]", answer):  # attribute access
        return False
    for name in _NAME.findall(answer):
        if name not in MATH_NAMES and (len(name) > 2 or name in _UNSAFE_SHORT):
            return False
    return True
