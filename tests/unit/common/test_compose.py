"""rg_verl.common.compose: a YAML file that does not parse is one line, ``file:line:column: what is wrong``, wherever a
config is read (the entry points' own tests run each command on a broken file)."""

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from rg_verl.common.compose import (
    YamlSyntaxError,
    check_yaml,
    compose,
    config_parser,
    hydra_argv,
    yaml_config,
    yaml_error,
)
from rg_verl.common.schema import ConfigError


def error_of(text: str) -> yaml.YAMLError:
    with pytest.raises(yaml.YAMLError) as error:
        yaml.safe_load(text)
    return error.value


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("a: [1, 2\nb: 3\n", "f.yaml:2:2: expected ',' or ']', but got ':' (while parsing a flow sequence that began "
                              "at 1:4)"),
        ("a: 1\n  b: 2\n", "f.yaml:2:4: mapping values are not allowed here"),
        ("a: 1\nb:\n  c: 2\n d: 3\n", "f.yaml:4:2: expected <block end>, but found '<block mapping start>' (while "
                                      "parsing a block mapping that began at 1:1)"),
        ("a:\n\t- 1\n", "f.yaml:2:1: found character '\\t' that cannot start any token (while scanning for the next "
                        "token)"),
        ('a: "open\n', "f.yaml:2:1: found unexpected end of stream (while scanning a quoted scalar that began at 1:4)"),
    ],
)  # fmt: skip
def test_a_yaml_error_is_one_line_with_its_line_and_column_counted_from_one(text, line):
    assert str(yaml_error(error_of(text), "f.yaml")) == line


@given(st.text(alphabet=":-[]{},'\"\t #&*!|>a1\n", max_size=40))
def test_any_yaml_error_is_one_line_naming_the_file_and_a_place_in_it(text):
    try:
        yaml.safe_load(text)
    except yaml.YAMLError as error:
        message = str(yaml_error(error, "f.yaml"))
        assert "\n" not in message and message.startswith("f.yaml:")
        line, column = (int(n) for n in message.split(":")[1:3])
        assert 1 <= line <= text.count("\n") + 1 and column >= 1


def test_a_file_read_by_omegaconf_is_named_by_its_path(tmp_path):
    (tmp_path / "eval.yaml").write_text("max_tokens: 8\nmax_tokens: 9\n")
    with pytest.raises(YamlSyntaxError) as error:
        yaml_config(tmp_path / "eval.yaml")
    assert str(error.value) == (
        f"{tmp_path / 'eval.yaml'}:2:1: found duplicate key max_tokens (while constructing a mapping that began at 1:1)"
    )
    assert isinstance(error.value, ConfigError)  # the commands that catch ConfigError catch it too


def broken_layer(folder):
    """A config whose defaults list loads ``layer.yaml``, which has a bad indent on its line 3."""
    (folder / "main.yaml").write_text("defaults:\n  - layer\n  - _self_\nfoo: 1\n")
    (folder / "layer.yaml").write_text("a: 1\nb:\n c: 2\n  d: 3\n")
    return folder / "layer.yaml"


def test_hydras_compose_names_the_broken_file_of_the_defaults_list(tmp_path):
    layer = broken_layer(tmp_path)
    with pytest.raises(YamlSyntaxError, match=rf"^{layer}:4:4: mapping values are not allowed here$"):
        compose(str(tmp_path), "main", [])


def hydra_args(folder, name: str, *overrides: str) -> list[str]:
    command = ["--config-path", str(folder), "--config-name", name, *overrides]
    return hydra_argv(config_parser("train", "a test command"), command, "train_grpo")


def test_check_yaml_leaves_every_other_failure_to_hydra(tmp_path):
    layer = broken_layer(tmp_path)
    args = hydra_args(tmp_path, "main", "x=1")
    with pytest.raises(YamlSyntaxError, match=f"^{layer}:4:4: "):
        check_yaml(args)
    check_yaml([*args, "--help"])  # a help request: Hydra answers it
    layer.write_text("a: 1\n")
    check_yaml(args)
    check_yaml(hydra_args(tmp_path, "absent"))  # Hydra says the config is missing, as it does
