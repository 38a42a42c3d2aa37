"""The evaluation config's value checks that no type check covers, and the parser of one YAML entry.

Each takes ``where`` (the field's path, e.g. ``categories[0].datasets[1].dataset``) and the value, and
answers the checked value or raises :class:`rg_verl.common.schema.ConfigError` naming the field and the fix.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from reasoning_gym.factory import DATASETS

from rg_verl.common.schema import ConfigError, parse_section
from rg_verl.data.config import dataset_name_error

__all__ = ["above_zero", "dataset_names", "maybe_text", "parse_entry", "run_name", "text"]


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


def dataset_names(where: str, value: Any) -> list[str]:
    if not isinstance(value, list):
        raise ConfigError(f"{where}: {value!r} is not a list of dataset names")
    for i, name in enumerate(value):
        if name not in DATASETS:
            raise dataset_name_error(f"{where}[{i}]", str(name))
    return list(value)


def run_name(where: str, value: Any) -> str | None:
    name = maybe_text(where, value)
    if name is not None and ("/" in name or name in (".", "..")):
        raise ConfigError(f"{where}: {name!r} must be a plain folder name, without '/'")
    return name


def parse_entry(cls: type, data: Any, where: str, shape: str, skip: tuple[str, ...] = ()) -> Any:
    """``parse_section`` for one entry of this file, which has required fields and may leave some blank.

    A key in ``cls.NULL_MEANS_DEFAULT`` set to null (a blank YAML value) takes its default, as in
    reasoning-gym's files; a required key that is absent goes to its parser as None, and the parser says
    what it needs.
    """
    if not isinstance(data, dict):
        raise ConfigError(f"{where or 'config'}: expected {shape}, got {data!r}")
    blank = getattr(cls, "NULL_MEANS_DEFAULT", ())
    values = {key: value for key, value in data.items() if value is not None or key not in blank}
    for f in dataclasses.fields(cls):
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            values.setdefault(f.name, None)
    return parse_section(cls, values, where, skip=skip)
