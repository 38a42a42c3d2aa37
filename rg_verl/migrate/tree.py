"""Config trees for ``rg-verl migrate-config``: nested mappings flattened, merged and compared; one migration's record.

>>> same(True, 1), same(1, 1.0), same("${.a}", "${x.a}", "x.b")
(False, True, True)
>>> differences({"a": {"b": 1, "c": 2}, "d": []}, {"a": {"b": 1.0}, "d": []})
{'a': {'c': 2}}
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

__all__ = [
    "MISSING", "Migration", "Unmapped", "as_type_of", "container", "differences", "flatten", "get", "known",
    "merge", "put", "same",
]  # fmt: skip

# a key that is not there (None is a value)
MISSING: Any = type("Missing", (), {"__repr__": lambda self: "MISSING", "__bool__": lambda self: False})()

Unmapped = list[tuple[str, str]]


def container(value: Any) -> Any:
    """Plain dicts and lists of an OmegaConf value, interpolations kept as text; other values as they are."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if isinstance(value, DictConfig | ListConfig):
        return OmegaConf.to_container(value, resolve=False)
    return value


def flatten(tree: Mapping, prefix: str = "") -> dict[str, Any]:
    """``{"a.b": leaf}``; lists and empty mappings are leaves."""
    flat = {}
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, f"{path}."))
        else:
            flat[path] = value
    return flat


def merge(base: Mapping, top: Mapping) -> dict:
    """``top`` over ``base``, recursively; a section that ``top`` leaves blank (None) keeps ``base``'s."""
    merged = copy.deepcopy(dict(base))
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = merge(merged[key], value)
        elif value is not None or not isinstance(merged.get(key), Mapping):
            merged[key] = copy.deepcopy(value)
    return merged


def get(tree: Any, path: str) -> Any:
    """The value at dotted ``path``, or :data:`MISSING`."""
    for part in path.split("."):
        if not isinstance(tree, Mapping) or part not in tree:
            return MISSING
        tree = tree[part]
    return tree


def put(tree: dict, path: str, value: Any) -> None:
    """Set dotted ``path`` in ``tree``, making the mappings on the way."""
    *parents, leaf = path.split(".")
    for part in parents:
        tree = tree.setdefault(part, {})
    tree[leaf] = value


def known(defaults: Mapping, path: str) -> bool:
    """Whether ``defaults`` has ``path``: the key itself, or an empty (free-form) mapping above it."""
    tree = defaults
    for part in path.split("."):
        if not isinstance(tree, Mapping):
            return False
        if part not in tree:
            return tree == {}  # engine_kwargs.vllm, override_config: any key goes
        tree = tree[part]
    return True


_INTERPOLATION = re.compile(r"^\$\{(?:oc\.select:)?\s*([^,}\s]+)\s*(?:,[^}]*)?\}$")


def _target(value: str, path: str) -> str | None:
    """The key an interpolation points at (a relative one resolved from ``path``), else None."""
    match = _INTERPOLATION.match(value)
    if not match:
        return None
    target = match.group(1)
    dots = len(target) - len(target.lstrip("."))
    if not dots:
        return target
    return ".".join([*path.split(".")[:-dots], target[dots:]])


def same(a: Any, b: Any, path: str = "") -> bool:
    """Whether ``a`` and ``b`` mean the same at ``path`` (see the module's docstring)."""
    if isinstance(a, str) and isinstance(b, str):
        targets = _target(a, path), _target(b, path)
        return targets[0] == targets[1] if any(targets) else a == b
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return float(a) == float(b)
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(same(a[k], b[k], f"{path}.{k}") for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(same(x, y, path) for x, y in zip(a, b, strict=True))
    return a == b


def as_type_of(value: Any, default: Any) -> Any:
    """``value`` as a number where ``default`` is one and ``value`` is its text.

    >>> as_type_of("1e-6", 1e-05), as_type_of("8", 4), as_type_of("x", 4), as_type_of("1", True)
    (1e-06, 8, 'x', '1')
    """
    if not isinstance(value, str) or isinstance(default, bool) or not isinstance(default, int | float):
        return value
    try:
        number = float(value)
    except ValueError:
        return value
    return int(number) if isinstance(default, int) and number.is_integer() else number


def differences(desired: Any, default: Any, path: str = "") -> Any:
    """The part of ``desired`` that differs from ``default`` (:data:`MISSING` when none does)."""
    if isinstance(desired, Mapping) and isinstance(default, Mapping):
        out = {}
        for key, value in desired.items():
            sub = differences(value, default.get(key, MISSING), f"{path}.{key}" if path else str(key))
            if sub is not MISSING:
                out[key] = sub
        return out or MISSING
    if default is not MISSING and same(desired, default, path):
        return MISSING
    return desired


class Migration:
    """One config's migration: the old config, our defaults, and what it has found so far."""

    def __init__(self, old: Mapping, defaults: Mapping, written: set[str]):
        self.old = old
        self.defaults = defaults
        self.written = written
        self.desired: dict[str, Any] = {}  # dotted key of ours -> value
        self.unmapped: Unmapped = []

    def report(self, key: str, why: str) -> None:
        """``key`` of the old config has no exact equivalent, for the reason ``why``."""
        self.unmapped.append((key, why))

    def set(self, path: str, value: Any) -> None:
        """Our key ``path`` takes ``value`` (a number's text read as the number our default is)."""
        self.desired[path] = as_type_of(value, get(self.defaults, path))
