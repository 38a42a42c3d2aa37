"""Tests for rg_verl.common.schema: fields declared with option(), one parser, errors that name field, value and fix."""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st
from omegaconf import OmegaConf

from rg_verl.common.schema import (
    DEFAULT_INT_RANGE,
    ConfigError,
    FieldDoc,
    above_zero,
    check,
    check_keys,
    check_module_path,
    field_docs,
    maybe_text,
    option,
    parse_section,
    run_name,
    text,
)
from tests.helpers import REPO


@dataclass
class Inner:
    depth: int = option(2, "levels", low=1, high=5)
    names: list[str] = option(["a"], "names")


def _comma_list(where: str, value) -> list[str]:
    if not isinstance(value, str):
        raise ConfigError(f"{where}: {value!r} is not a comma list")
    return value.split(",")


@dataclass
class Probe:
    """A section with one field of every kind the parser checks."""

    count: int = option(3, "a count", low=1, high=10)
    seed: int = option(0, "a seed, default limits")
    rate: float = option(0.5, "a share", low=0.0, high=1.0)
    scale: float = option(1.0, "any finite number")
    mode: str = option("mean", "pooling", choices=("mean", "max"), noun="mode")
    enabled: bool = option(False, "a switch")
    label: str = option("x", "text")
    limit: int | None = option(None, "optional count", low=1, high=100, doc_default="auto")
    tags: list[str] = option([], "text items")
    extra: dict = option({}, "free mapping")
    parts: list[str] = option(["p"], "parsed by hand", parse=_comma_list)
    inner: Inner = option(Inner, "a nested section")
    seen: list = option([], "where validate() was called from")

    def validate(self, where: str) -> None:
        self.seen.append(where)
        if self.mode == "max" and self.limit is None:
            raise ConfigError(f"{where}.limit: mode max needs a limit; set one")


def parse(section, where: str = "probe", **kwargs) -> Probe:
    return parse_section(Probe, section, where, **kwargs)


def test_absent_keys_take_the_declared_defaults():
    for section in (None, {}, OmegaConf.create({})):
        probe = parse(section)
        assert dataclasses.replace(probe, seen=[]) == Probe(seen=[]) and probe.seen == ["probe"]


def test_every_kind_of_field_parses_its_value():
    section = {
        "count": 10,
        "seed": 7,
        "rate": 1,
        "scale": -2.5,
        "mode": "max",
        "enabled": True,
        "label": "y",
        "limit": 4,
        "tags": ["a", "b"],
        "extra": {"k": [1]},
        "parts": "x,y",
        "inner": {"depth": 5, "names": []},
    }
    probe = parse(section)
    expected = Probe(10, 7, 1.0, -2.5, "max", True, "y", 4, ["a", "b"], {"k": [1]}, ["x", "y"], Inner(5, []), ["probe"])
    assert probe == expected
    assert isinstance(probe.rate, float) and isinstance(probe.scale, float)  # an integer for a float: a float


def test_an_omegaconf_section_is_read_as_plain_values():
    section = OmegaConf.create({"base": 4, "probe": {"count": "${base}", "tags": ["a"], "inner": {"depth": 3}}})
    probe = parse(section.probe)
    assert probe.count == 4 and probe.tags == ["a"] and type(probe.tags) is list and probe.inner.depth == 3


def test_a_blank_mapping_or_list_means_its_empty_default():
    """``tags:`` in YAML is None: for a field whose default is empty, that is the default."""
    probe = parse({"tags": None, "extra": None, "seen": None})
    assert probe.tags == [] and probe.extra == {}
    assert parse({"inner": None}).inner == Inner()  # a blank nested section: its defaults
    with pytest.raises(ConfigError, match=r"^probe\.parts: None is not a comma list$"):
        parse({"parts": None})  # a non-empty default is not blanked: the value goes to its parser
    with pytest.raises(ConfigError, match=r"^probe\.count: None is not an integer in \[1, 10\]; set one$"):
        parse({"count": None})


def test_none_is_a_value_only_of_optional_fields():
    assert parse({"limit": None}).limit is None
    with pytest.raises(ConfigError, match=r"^probe\.label: None is not text; set a string$"):
        parse({"label": None})


def test_default_mutables_are_copied_per_instance():
    first, second = Probe(), Probe()
    first.tags.append("x")
    first.extra["k"] = 1
    first.inner.names.append("b")
    assert second.tags == [] and second.extra == {} and second.inner.names == ["a"]
    assert Probe().parts == ["p"]


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"count": 0}, r"^probe\.count: 0 is not an integer in \[1, 10\]; set one$"),
        ({"count": 2.0}, r"^probe\.count: 2\.0 is not an integer in \[1, 10\]; set one$"),
        ({"count": True}, r"^probe\.count: True is not an integer"),  # a bool is no count
        ({"count": "3"}, r"^probe\.count: '3' is not an integer"),
        ({"seed": -1}, rf"^probe\.seed: -1 is not an integer in \[0, {DEFAULT_INT_RANGE[1]}\]; set one$"),
        ({"rate": 1.5}, r"^probe\.rate: 1\.5 is above 1\.0; set a value <= 1\.0$"),
        ({"rate": -0.1}, r"^probe\.rate: -0\.1 is below 0\.0; set a value >= 0\.0$"),
        ({"scale": math.nan}, r"^probe\.scale: nan is not a finite number; set a number$"),
        ({"scale": math.inf}, r"^probe\.scale: inf is not a finite number"),
        ({"scale": False}, r"^probe\.scale: False is not a finite number"),
        ({"mode": "fuzzy"}, r"^probe\.mode: 'fuzzy' is not a mode; set one of mean, max$"),
        ({"enabled": "yes"}, r"^probe\.enabled: 'yes' is not true or false; set one$"),
        ({"enabled": 1}, r"^probe\.enabled: 1 is not true or false"),
        ({"label": 3}, r"^probe\.label: 3 is not text; set a string$"),
        ({"limit": 0}, r"^probe\.limit: 0 is not an integer in \[1, 100\]"),  # an Optional keeps its limits
        ({"tags": "a"}, r"^probe\.tags: 'a' is not a list; set one, e\.g\. \[\]$"),
        ({"tags": ["a", 2]}, r"^probe\.tags\[1\]: 2 is not text; set a string$"),
        ({"extra": [1]}, r"^probe\.extra: \[1\] is not a mapping; set one, e\.g\. \{\}$"),
        ({"parts": 3}, r"^probe\.parts: 3 is not a comma list$"),  # parse= replaces the type check
        ({"inner": {"depth": 9}}, r"^probe\.inner\.depth: 9 is not an integer in \[1, 5\]"),
        ({"inner": {"names": [1]}}, r"^probe\.inner\.names\[0\]: 1 is not text"),
        ({"inner": 3}, r"^probe\.inner: expected a mapping of fields, got int$"),
        ({"mode": "max"}, r"^probe\.limit: mode max needs a limit; set one$"),  # validate() runs last
    ],
)
def test_each_violation_names_the_field_the_value_and_the_fix(section, message):
    with pytest.raises(ConfigError, match=message):
        parse(section)


def test_validate_runs_after_the_fields_are_parsed_with_the_sections_name():
    probe = parse({"mode": "max", "limit": 2}, where="model.pool")
    assert probe.seen == ["model.pool"]


def test_a_section_that_is_not_a_mapping_is_refused():
    with pytest.raises(ConfigError, match=r"^probe: expected a mapping of fields, got list$"):
        parse([1])
    with pytest.raises(ConfigError, match=r"^config: expected a mapping of fields, got str$"):
        parse("count=3", where="")


def test_unknown_keys_suggest_the_closest_field():
    with pytest.raises(ConfigError, match=r"^probe\.cont: unknown key \(did you mean 'count'\?\); valid keys: count, "):
        parse({"cont": 3})
    with pytest.raises(ConfigError) as raised:
        parse({"zzzzzz": 3})
    assert "did you mean" not in str(raised.value) and "valid keys: count, seed, rate" in str(raised.value)
    with pytest.raises(ConfigError, match=r"^probe\.inner\.dept: unknown key \(did you mean 'depth'\?\)"):
        parse({"inner": {"dept": 3}})
    with pytest.raises(ConfigError, match=r"^cont: unknown key"):  # a top-level section: no leading dot
        parse({"cont": 3}, where="")


def test_skipped_fields_are_unknown_keys_of_the_section():
    with pytest.raises(ConfigError, match=r"^probe\.seen: unknown key .*; valid keys: count, .*, inner$"):
        parse({"seen": []}, skip=("seen",))
    check_keys("probe", {"count": 1}, Probe, skip=("seen",))


@given(value=st.integers(min_value=1, max_value=10))
def test_any_integer_within_the_bounds_passes(value):
    assert parse({"count": value}).count == value
    assert check("x", int, value, low=1, high=10) == value


@given(value=st.integers().filter(lambda v: not 1 <= v <= 10))
def test_any_integer_outside_the_bounds_fails(value):
    with pytest.raises(ConfigError, match=rf"^probe\.count: {value} is not an integer in \[1, 10\]; set one$"):
        parse({"count": value})
    with pytest.raises(ConfigError, match=rf"^x: {value} is not an integer in \[1, 10\]"):
        check("x", int, value, low=1, high=10)


@given(value=st.floats(min_value=0.0, max_value=1.0))
def test_any_float_within_the_bounds_passes(value):
    assert parse({"rate": value}).rate == value


@given(value=st.floats(allow_nan=False).filter(lambda v: not 0.0 <= v <= 1.0))
def test_any_float_outside_the_bounds_fails(value):
    with pytest.raises(ConfigError, match=r"^probe\.rate: "):
        parse({"rate": value})


@given(value=st.sampled_from(DEFAULT_INT_RANGE) | st.integers(*DEFAULT_INT_RANGE))
def test_an_integer_field_without_limits_takes_the_default_range(value):
    assert parse({"seed": value}).seed == value
    with pytest.raises(ConfigError):
        parse({"seed": DEFAULT_INT_RANGE[1] + 1 + value})


def test_field_docs_flattens_nested_sections_with_their_defaults_and_help():
    docs = {doc.name: doc for doc in field_docs(Probe)}
    assert list(docs) == [
        "count",
        "seed",
        "rate",
        "scale",
        "mode",
        "enabled",
        "label",
        "limit",
        "tags",
        "extra",
        "parts",
        "inner.depth",
        "inner.names",
        "seen",
    ]
    assert docs["count"] == FieldDoc("count", 3, "a count")
    assert docs["inner.depth"] == FieldDoc("inner.depth", 2, "levels")
    assert docs["inner.names"].default == ["a"] and docs["tags"].default == []  # from the default factory
    shown = {name: doc.shown for name, doc in docs.items()}
    assert shown == {
        "count": "3",
        "seed": "0",
        "rate": "0.5",
        "scale": "1.0",
        "mode": "mean",
        "enabled": "false",
        "label": "x",
        "limit": "auto",
        "tags": "[]",
        "extra": "{}",
        "parts": '["p"]',
        "inner.depth": "2",
        "inner.names": '["a"]',
        "seen": "[]",
    }
    assert [doc.name for doc in field_docs(Inner, prefix="probe.inner.")] == ["probe.inner.depth", "probe.inner.names"]


def test_field_docs_of_a_field_without_default():
    @dataclass
    class Required:
        name: str = option(help="must be given")

    (doc,) = field_docs(Required)
    assert doc.default is dataclasses.MISSING and doc.help == "must be given"
    with pytest.raises(TypeError):  # a field without default must be given: the dataclass says so
        parse_section(Required, {}, "required")
    assert parse_section(Required, {"name": "n"}, "required").name == "n"


# ---- checks several sections share


def test_check_module_path_accepts_modules_that_exist():
    check_module_path("f.path", "pkg://rg_verl.common.names", "rg_verl")
    check_module_path("f.path", "pkg://rg_verl.reward", "rg_verl")  # a package
    check_module_path("f.path", str(REPO / "rg_verl" / "common" / "names.py"), "rg_verl")
    check_module_path("f.path", "pkg://verl.trainer.main_ppo", "rg_verl")  # another package's: left to it
    check_module_path("f.path", "/somewhere/else/custom.py", "rg_verl")
    check_module_path("f.path", None, "rg_verl")


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("pkg://rg_verl.nope", r"^f\.path: 'pkg://rg_verl\.nope' names no module of rg_verl; fix the path$"),
        ("pkg://rg_verl.nope.deeper", r"names no module of rg_verl"),  # its parent package is missing
        # the file of a module that became a package: the library would load a missing file
        (
            str(REPO / "rg_verl" / "reward.py"),
            rf"^f\.path: '{re.escape(str(REPO))}/rg_verl/reward\.py' does not "
            r"exist; set f\.path=pkg://rg_verl\.reward$",
        ),
    ],
)
def test_check_module_path_names_the_fix(path, message):
    with pytest.raises(ConfigError, match=message):
        check_module_path("f.path", path, "rg_verl")


@given(st.one_of(st.floats(allow_nan=True), st.integers(), st.booleans(), st.text(), st.none()))
def test_above_zero_takes_exactly_the_finite_numbers_in_the_interval(value):
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and 0 < value <= 1
    if ok:
        assert above_zero("top_p", value, 1.0) == float(value)
    else:
        with pytest.raises(ConfigError, match=r"top_p: .* is not a number in \(0, 1.0\]"):
            above_zero("top_p", value, 1.0)


def test_text_fields_and_names():
    assert text("model_path", "m") == "m" and maybe_text("x", None) is None
    with pytest.raises(ConfigError, match="model_path: '' is not a non-empty string"):
        text("model_path", "")
    assert run_name("run_name", "mine") == "mine"
    for bad in ("a/b", "..", "."):
        with pytest.raises(ConfigError, match="must be a plain folder name"):
            run_name("run_name", bad)
