"""Config fields declared once (:func:`option`: default, help, limits) and :func:`parse_section`, the one parser.

Each error is a :class:`ConfigError` naming field, value and fix; cross-field checks are a class's ``validate(where)``.

>>> from dataclasses import dataclass
>>> @dataclass
... class Window:
...     size: int = option(32, "samples in the window", low=1)
>>> parse_section(Window, {"sise": 8}, "window")
Traceback (most recent call last):
...
rg_verl.common.schema.ConfigError: window.sise: unknown key (did you mean 'size'?); valid keys: size
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.util
import json
import math
import os
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

__all__ = [
    "ConfigError", "FieldDoc", "field_docs", "named_mappings", "option", "parse_section", "plain",
    "check", "check_keys", "check_module_path"
]

DEFAULT_INT_RANGE = (0, 10**9)  # an integer field without limits: counts and seeds fit, absurd values do not
_NO_DEFAULT = dataclasses.MISSING


class ConfigError(ValueError):
    """A config field with a bad value; the message says which field, what is wrong and the fix."""


def option(default: Any = _NO_DEFAULT, help: str = "", *, low: float | None = None, high: float | None = None,
           choices: tuple | None = None, parse: Callable[[str, Any], Any] | None = None, doc_default: str | None = None,
           noun: str | None = None) -> Any:  # fmt: skip
    """A dataclass field with its default, a one-line ``help``, and its limits."""
    metadata = dict(help=help, low=low, high=high, choices=choices, parse=parse, doc_default=doc_default, noun=noun)
    if isinstance(default, dict | list):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata=metadata)
    if dataclasses.is_dataclass(default) and isinstance(default, type):
        return dataclasses.field(default_factory=default, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def plain(value: Any) -> Any:
    """An OmegaConf node as plain dicts and lists (interpolations resolved); anything else unchanged."""
    if isinstance(value, DictConfig | ListConfig):
        return OmegaConf.to_container(value, resolve=True)
    return value


def named_mappings(where: str, value: Any, shape: str, inner: str) -> dict[str, dict]:
    """A mapping of names to mappings as plain dicts; ``shape`` and ``inner`` are the fixes an error suggests.

    >>> named_mappings("levels", {"chain_sum": 3}, "{dataset: {attribute: level}}", "{attribute: level}")
    Traceback (most recent call last):
    ...
    rg_verl.common.schema.ConfigError: levels.chain_sum: 3 is not a mapping; set {attribute: level}
    """
    value = plain(value) or {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: {value!r} is not a mapping; set {shape}")
    mappings = {}
    for name, entry in value.items():
        entry = entry or {}
        if not isinstance(entry, Mapping):
            raise ConfigError(f"{where}.{name}: {entry!r} is not a mapping; set {inner}")
        mappings[str(name)] = dict(entry)
    return mappings


def check_keys(where: str, given: Mapping, cls: type, skip: tuple[str, ...] = ()) -> None:
    """Every key of ``given`` must be a field of dataclass ``cls`` (except ``skip``)."""
    valid = [f.name for f in dataclasses.fields(cls) if f.name not in skip]
    for key in given:
        if key not in valid:
            close = difflib.get_close_matches(str(key), valid, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"{_join(where, key)}: unknown key{hint}; valid keys: {', '.join(valid)}")


def _join(where: str, key: Any) -> str:
    return f"{where}.{key}" if where else str(key)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _check_type(where: str, kind: Any, value: Any, meta: Mapping) -> Any:
    """``value`` checked against annotation ``kind`` and the field's limits."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _check_type(where, inner, value, meta)
    if meta.get("choices") is not None:
        if value not in meta["choices"]:
            what = f"a {meta['noun']}" if meta.get("noun") else "valid"
            raise ConfigError(f"{where}: {value!r} is not {what}; set one of {', '.join(map(str, meta['choices']))}")
        return value
    if kind is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: {value!r} is not true or false; set one")
        return value
    if kind is int:
        low, high = (int(d if v is None else v) for v, d in zip((meta.get("low"), meta.get("high")), DEFAULT_INT_RANGE))
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ConfigError(f"{where}: {value!r} is not an integer in [{low}, {high}]; set one")
        return value
    if kind is float:
        return _check_float(where, value, meta.get("low"), meta.get("high"))
    if kind is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: {value!r} is not text; set a string")
        return value
    if origin is list or kind is list:
        if not isinstance(value, list):
            raise ConfigError(f"{where}: {value!r} is not a list; set one, e.g. []")
        inner = args[0] if args else Any
        return [_check_type(f"{where}[{i}]", inner, v, {}) if inner is not Any else v for i, v in enumerate(value)]
    if origin is dict or kind is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: {value!r} is not a mapping; set one, e.g. {{}}")
        return dict(value)
    return value


def check(where: str, kind: Any, value: Any, *, low: float | None = None, high: float | None = None) -> Any:
    """One value checked as a field declared ``kind = option(..., low=, high=)`` would be.

    >>> check("levels.math.max_level", int, 7, low=1, high=5)
    Traceback (most recent call last):
    ...
    rg_verl.common.schema.ConfigError: levels.math.max_level: 7 is not an integer in [1, 5]; set one
    """
    return _check_type(where, kind, value, {"low": low, "high": high})


def _check_float(where: str, value: Any, low: float | None, high: float | None) -> float:
    if not _is_number(value):
        raise ConfigError(f"{where}: {value!r} is not a finite number; set a number")
    if low is not None and value < low:
        raise ConfigError(f"{where}: {value} is below {low}; set a value >= {low}")
    if high is not None and value > high:
        raise ConfigError(f"{where}: {value} is above {high}; set a value <= {high}")
    return float(value)


def parse_section(cls: type, section: Any, where: str, skip: tuple[str, ...] = ()) -> Any:
    """An instance of dataclass ``cls`` from mapping ``section`` (None: every default); ``skip`` keys are refused."""
    section = {} if (section := plain(section)) is None else section
    if not isinstance(section, Mapping):
        raise ConfigError(f"{where or 'config'}: expected a mapping of fields, got {type(section).__name__}")
    check_keys(where, section, cls, skip=skip)
    hints = typing.get_type_hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        if f.name not in section:
            continue
        name, value, kind = _join(where, f.name), section[f.name], hints[f.name]
        if value is None and _blank_is_empty(f, kind):
            continue  # a blank YAML value (``config:``) for a mapping or list: its empty default
        if f.metadata.get("parse") is not None:
            values[f.name] = f.metadata["parse"](name, value)
        elif dataclasses.is_dataclass(kind):
            values[f.name] = parse_section(kind, value, name)
        else:
            values[f.name] = _check_type(name, kind, value, f.metadata)
    instance = cls(**values)
    if hasattr(instance, "validate"):
        instance.validate(where)
    return instance


def _blank_is_empty(f: dataclasses.Field, kind: Any) -> bool:
    """Whether None means the default: the field holds a mapping or a list, empty by default, never None."""
    if type(None) in typing.get_args(kind) or f.default_factory is _NO_DEFAULT:
        return False
    empty = f.default_factory()
    return isinstance(empty, dict | list) and not empty


def text(where: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: {value!r} is not a non-empty string; set one")
    return value


def maybe_text(where: str, value: Any) -> str | None:
    return None if value is None else text(where, value)


def above_zero(where: str, value: Any, high: float) -> float:
    """A number in ``(0, high]`` (``option``'s limits are closed: 0 itself must fail here)."""
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or not 0 < value <= high:
        raise ConfigError(f"{where}: {value!r} is not a number in (0, {high}]; set one")
    return float(value)


def run_name(where: str, value: Any) -> str | None:
    name = maybe_text(where, value)
    if name is not None and ("/" in name or name in (".", "..")):
        raise ConfigError(f"{where}: {name!r} must be a plain folder name, without '/'")
    return name


def parse_entry(cls: type, data: Any, where: str, shape: str, skip: tuple[str, ...] = ()) -> Any:
    """``parse_section`` for a YAML entry: a ``NULL_MEANS_DEFAULT`` key set to null takes its default."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where or 'config'}: expected {shape}, got {data!r}")
    blank = getattr(cls, "NULL_MEANS_DEFAULT", ())
    values = {key: value for key, value in data.items() if value is not None or key not in blank}
    for f in dataclasses.fields(cls):
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            values.setdefault(f.name, None)
    return parse_section(cls, values, where, skip=skip)


def _module_of(path: Any, package: str) -> str | None:
    """The module of ``package`` that ``pkg://<module>`` or ``.../<package>/x/y.py`` names, else None."""
    if not isinstance(path, str):
        return None
    if path.startswith("pkg://"):
        module = path[len("pkg://") :]
    elif path.endswith(".py") and f"{package}/" in path:
        module = package + "." + path.rsplit(f"{package}/", 1)[1][: -len(".py")].replace("/", ".")
    else:
        return None
    return module if module.split(".")[0] == package else None


def check_module_path(where: str, path: Any, package: str) -> None:
    """A field that names a module of ``package`` (``pkg://a.b`` or ``.../a/b.py``) must exist.

    >>> check_module_path("custom_cls.path", "pkg://rg_verl.tiny", "rg_verl")
    Traceback (most recent call last):
    ...
    rg_verl.common.schema.ConfigError: custom_cls.path: 'pkg://rg_verl.tiny' names no module of rg_verl; fix the path
    """
    if (module := _module_of(path, package)) is None:
        return
    try:
        found = importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        found = False
    if not found:
        raise ConfigError(f"{where}: {path!r} names no module of {package}; fix the path")
    if not path.startswith("pkg://") and not os.path.isfile(os.path.expanduser(path)):
        # e.g. .../rg_verl/reward.py, now the package rg_verl.reward
        raise ConfigError(f"{where}: {path!r} does not exist; set {where}=pkg://{module}")


@dataclasses.dataclass(frozen=True)
class FieldDoc:
    """One documented field: its dotted name, its default, its help."""

    name: str
    default: Any
    help: str
    doc_default: str | None = None

    @property
    def shown(self) -> str:
        """The default as docs' tables write it.

        >>> FieldDoc("enabled", False, "").shown, FieldDoc("levels", {}, "").shown, FieldDoc("p", None, "").shown
        ('false', '{}', 'none')
        """
        if self.doc_default is not None:
            return self.doc_default
        if self.default is None:
            return "none"
        if isinstance(self.default, bool | dict | list):
            return json.dumps(self.default)
        return str(self.default)


def field_docs(cls: type, prefix: str = "") -> list[FieldDoc]:
    """Every field of ``cls`` (nested sections flattened to ``a.b``), with its default and help."""
    docs = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        name = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(hints[f.name]):
            docs.extend(field_docs(hints[f.name], prefix=f"{name}."))
            continue
        if f.default is not _NO_DEFAULT:
            default = f.default
        elif f.default_factory is not _NO_DEFAULT:
            default = f.default_factory()
        else:
            default = _NO_DEFAULT
        docs.append(FieldDoc(name, default, f.metadata.get("help", ""), f.metadata.get("doc_default")))
    return docs
