"""Where math text states its final answer: the last ``\\boxed{}`` (MATH), and the text after GSM8K's ``####``."""

from __future__ import annotations

from typing import Any

__all__ = ["gsm8k_reference", "last_boxed"]

_BOXED, _FBOX = "\\boxed", "\\fbox"
# a letter after ``\boxed`` makes it another command (``\boxedfoo``)
_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ@")


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
    """Content of the last ``\\boxed{...}`` (else ``\\fbox{...}``), braces counted literally; else None."""
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
    """The text after the last ``####`` of a GSM8K reference solution (else all of it), without thousands separators.

    >>> gsm8k_reference("3 + 4 = 7 apples, so 1,234 - 7 = 1,227. #### 1,227"), gsm8k_reference(" 12 ")
    ('1227', '12')
    """
    text = answer_text if isinstance(answer_text, str) else str(answer_text)
    if "####" in text:
        text = text.rsplit("####", 1)[1]
    return text.strip().replace(",", "")
