"""The base YAML and the field tables of docs/ agree with the declared fields (rg_verl.common.schema.field_docs).

Each field of our sections is declared once, beside the code that reads it: rg_verl/data/config.py,
rg_verl/reward/config.py, and the ``tiny_model`` section in rg_verl/cpu/tiny_model.py and rg_verl/cpu/warm_start.py.
``rg_verl/conf/rg_verl_base.yaml`` lists the fields of
``reasoning_gym`` and the reward kwargs with their defaults and their help as the comment above each;
The docs pages' field tables list every section's fields with their defaults. A default that differs, a field
that is missing or one that no longer exists fails here.
"""

from __future__ import annotations

import dataclasses
import re
import typing

import pytest
from omegaconf import OmegaConf

from rg_verl.common.schema import FieldDoc, field_docs
from rg_verl.cpu.tiny_model import TinyModelConfig
from rg_verl.cpu.warm_start import WarmStartOptions
from rg_verl.data.config import DatasetSpec, ReasoningGymConfig
from rg_verl.retry.episode import RetryConfig
from rg_verl.reward.config import RewardConfig
from rg_verl.reward.terms import TERMS
from tests.helpers import REPO

BASE_YAML = REPO / "rg_verl" / "conf" / "rg_verl_base.yaml"
DOCS = REPO / "docs"

# our sections: where each sits in the composed config, and its declaration
SECTIONS = {
    "reasoning_gym": ReasoningGymConfig,
    "reward.custom_reward_function.reward_kwargs": RewardConfig,
    "retry": RetryConfig,
}
# the docs pages and their sections (headings) whose tables document each of our sections
README_HEADINGS = {
    "reasoning_gym": ("data.md", "# Data: the `reasoning_gym:` section", "## Curriculum and adaptive weights"),
    "reward.custom_reward_function.reward_kwargs": (
        "reward.md",
        "# Reward: `reward.custom_reward_function.reward_kwargs`",
    ),
    "retry": ("multiturn.md", "# Multi-turn episodes: the `retry:` section"),
}
# reward terms are a registry (rg_verl.reward.terms.TERMS), not fields: the YAML and the docs list each
# registered term, off; the declared default is no term at all
TERM_ROWS = {f"terms.{name}": "0.0" for name in TERMS}


def declared(section: str) -> list[FieldDoc]:
    """The documented fields of a section, as the YAML and the docs spell them."""
    docs = field_docs(SECTIONS[section])
    if section == "reasoning_gym":  # one entry of a mix, documented once for every name
        docs += field_docs(DatasetSpec, prefix="datasets.<name>.")
    return docs


def yaml_leaves(node: dict, cls: type, prefix: str = "") -> dict:
    """The base YAML's values under a section, flattened along the declared sub-sections."""
    nested = {name: kind for name, kind in typing.get_type_hints(cls).items() if dataclasses.is_dataclass(kind)}
    leaves = {}
    for key, value in node.items():
        if key in nested:
            leaves.update(yaml_leaves(value, nested[key], prefix=f"{prefix}{key}."))
        else:
            leaves[f"{prefix}{key}"] = value
    return leaves


def base_section(section: str) -> dict:
    base = OmegaConf.load(BASE_YAML)
    return OmegaConf.to_container(OmegaConf.select(base, section), resolve=False)


@pytest.mark.parametrize("section", SECTIONS)
def test_base_yaml_lists_every_declared_field_with_its_default(section):
    leaves = yaml_leaves(base_section(section), SECTIONS[section])
    docs = {doc.name: doc for doc in field_docs(SECTIONS[section])}
    if section.endswith("reward_kwargs"):
        assert docs.pop("terms").default == {}
        assert leaves.pop("terms") == {name: 0.0 for name in TERMS}, "every registered term, at weight 0"
        assert docs.pop("gates").default == {}
        assert leaves.pop("gates") == dict.fromkeys(TERMS, "none"), "every registered term, ungated"
    missing, extra = sorted(set(docs) - set(leaves)), sorted(set(leaves) - set(docs))
    assert not missing and not extra, f"{BASE_YAML.name} lacks {missing}; lists fields not declared: {extra}"
    for name, doc in docs.items():
        value = leaves[name]
        if doc.default is None and isinstance(value, str) and value.startswith("${"):
            # an interpolation where the declaration has none: the docs name what it points at
            assert value == f"${{{doc.doc_default}}}", f"{section}.{name}: {value} vs doc_default {doc.doc_default}"
        else:
            assert value == doc.default and type(value) is type(doc.default), f"{section}.{name}: {value!r}"


def yaml_comments() -> dict[str, list[str]]:
    """Each key of the base YAML (dotted path) -> the comment lines directly above it."""
    comments, path, block = {}, [], []
    for line in BASE_YAML.read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            block.append(stripped.lstrip("#").strip())
            continue
        match = re.match(r"^( *)([\w\"*]+):", line)
        if match:
            depth = len(match.group(1)) // 2
            path = path[:depth] + [match.group(2).strip('"')]
            comments[".".join(path)] = block
        if stripped or match:
            block = []
    return comments


@pytest.mark.parametrize("section", SECTIONS)
def test_base_yaml_comment_above_each_field_is_its_declared_help(section):
    comments = yaml_comments()
    cls = SECTIONS[section]
    helps = {doc.name: doc.help for doc in field_docs(cls)}
    helps |= {f.name: f.metadata["help"] for f in dataclasses.fields(cls)}  # the sub-sections' own help
    for name, help in helps.items():
        assert help, f"{cls.__name__}.{name} declares no help"
        above = comments.get(f"{section}.{name}")
        assert above, f"{section}.{name}: no comment above it in {BASE_YAML.name}"
        assert above[0] == help, f"{section}.{name}: the comment {above[0]!r} is not the declared help {help!r}"
    if section.endswith("reward_kwargs"):
        for name in TERMS:
            assert comments.get(f"{section}.terms.{name}"), f"terms.{name}: no comment above it"


def readme_rows(page_and_headings: tuple[str, ...]) -> dict[str, str]:
    """``field -> default`` of the field tables under the sections ``headings`` of the docs page ``page``."""
    page, *headings = page_and_headings
    text = (DOCS / page).read_text()
    rows = {}
    for heading in headings:
        assert re.search(rf"^{re.escape(heading)}", text, re.MULTILINE), f"docs/{page} has no section {heading!r}"
        body = re.split(rf"^{re.escape(heading)}", text, maxsplit=1, flags=re.MULTILINE)[1]
        body = re.split(r"^#{1,3} ", body, maxsplit=1, flags=re.MULTILINE)[0]
        for line in body.splitlines():
            match = re.match(r"^\| `([^`]+)` \| ([^|]*) \|", line)
            if match:
                name, default = match.group(1), match.group(2).strip()
                assert name not in rows, f"docs/{page} lists {name} twice"
                rows[name] = default.strip("`") if re.fullmatch(r"`[^`]*`", default) else default
    return rows


def assert_table(rows: dict[str, str], expected: dict[str, str]) -> None:
    """The docs' rows are the declared fields, each with its declared default."""
    assert set(rows) == set(expected), (
        f"missing from the docs: {sorted(set(expected) - set(rows))}; not declared: {sorted(set(rows) - set(expected))}"
    )
    for name, shown in expected.items():
        assert rows[name] == shown, f"docs: {name} defaults to {rows[name]!r}, the declaration to {shown!r}"


@pytest.mark.parametrize("section", SECTIONS)
def test_readme_table_lists_every_declared_field_with_its_default(section):
    rows = readme_rows(README_HEADINGS[section])
    expected = {doc.name: doc.shown for doc in declared(section)}
    if section.endswith("reward_kwargs"):
        del expected["terms"]
        expected |= TERM_ROWS
    assert_table(rows, expected)


def test_readme_evaluation_table_lists_every_evaluation_field_with_its_default():
    from rg_verl.evaluation.config import EvalConfig

    rows = readme_rows(("evaluation.md", "# Evaluation"))
    # name is the config file's stem, set by load_config: not a YAML key
    expected = {doc.name: doc.shown for doc in field_docs(EvalConfig) if doc.name != "name"}
    assert_table(rows, expected)


def test_readme_tiny_model_table_lists_every_field_with_its_default():
    rows = readme_rows(("cpu.md", "## The tiny model: the `tiny_model:` section"))
    # the warm start is one field of the section, and its options are documented one by one under it
    docs = field_docs(TinyModelConfig) + field_docs(WarmStartOptions, prefix="warm_start.")
    expected = {doc.name: doc.shown for doc in docs}
    assert_table(rows, expected)
    assert all(doc.help for doc in docs), "every tiny_model field declares its help"
