"""The config trees behind rg-verl migrate-config: flatten, put, merge, comparison by meaning, differences."""

import math

from hypothesis import assume, given
from hypothesis import strategies as st
from omegaconf import OmegaConf

from rg_verl.migrate.tree import MISSING, Migration, as_type_of, differences, flatten, get, known, merge, put, same

KEYS = st.text(alphabet="abcxyz_", min_size=1, max_size=4)
NUMBERS = st.integers(-5, 5) | st.floats(-2, 2, allow_nan=False)
LEAVES = st.none() | st.booleans() | NUMBERS | st.text("ab1.", max_size=3) | st.lists(NUMBERS, max_size=2)
TREES = st.recursive(LEAVES, lambda inner: st.dictionaries(KEYS, inner, min_size=1, max_size=3), max_leaves=12)
MAPPINGS = st.dictionaries(KEYS, TREES, max_size=4)


@given(MAPPINGS)
def test_put_rebuilds_what_flatten_took_apart(tree):
    rebuilt = {}
    for path, value in flatten(tree).items():
        put(rebuilt, path, value)
        assert get(tree, path) == value
    assert rebuilt == tree


@given(MAPPINGS)
def test_a_tree_has_no_differences_from_itself_and_all_of_them_from_nothing(tree):
    assert differences(tree, tree) is MISSING
    assert differences(tree, {}) == (tree or MISSING)


def shapes_clash(desired, default) -> bool:
    """Whether a list of ``desired`` sits where ``default`` has a mapping, or a mapping where it has a list: no
    Hydra merge can lay one over the other (OmegaConf: "Cannot merge DictConfig with ListConfig", either way), so no
    config can ask for it."""
    if isinstance(desired, dict) and isinstance(default, dict):
        return any(shapes_clash(value, default[key]) for key, value in desired.items() if key in default)
    return isinstance(desired, list) and isinstance(default, dict) or isinstance(desired, dict) and isinstance(
        default, list
    )


@given(MAPPINGS, MAPPINGS)
def test_differences_laid_over_the_defaults_give_the_desired_values(desired, default):
    """What a migrated config lists, merged over the defaults the way Hydra merges, gives every desired value."""
    assume(not shapes_clash(desired, default))
    listed = differences(desired, default)
    merged = OmegaConf.to_container(OmegaConf.merge(default, {} if listed is MISSING else listed))
    for path, value in flatten(desired).items():
        got = get(merged, path)
        assert got is not MISSING and same(got, value, path), (path, value, got)


def test_same_compares_interpolations_by_target_numbers_by_value_and_bools_apart():
    assert same("${actor.use_dynamic_bsz}", "${oc.select:actor.use_dynamic_bsz,false}")
    assert same("${.ppo_max_token_len_per_gpu}", "${critic.ppo_max_token_len_per_gpu}", "critic.forward_max")
    assert not same("${data.max_prompt_length}", "${data.max_response_length}")
    assert not same("${data.max_prompt_length}", 512)
    assert same(1, 1.0) and same(0.2, 0.2) and not same(0.2, 0.3)
    assert not same(True, 1) and not same(0, False) and same(False, False)
    assert same(None, None) and not same(None, 0)
    assert same({"a": [1, 2]}, {"a": [1.0, 2]}) and not same({"a": 1}, {"a": 1, "b": 2})


@given(st.floats(min_value=1e-12, max_value=1e12, allow_nan=False))
def test_a_number_written_as_text_takes_the_type_of_the_default(number):
    text = repr(number)
    assert math.isclose(as_type_of(text, 0.5), number)
    assert as_type_of(text, True) == text  # a bool default is no number
    assert as_type_of(text, "x") == text


def test_known_accepts_a_key_under_a_free_form_mapping_only():
    defaults = {"a": {"b": 1, "kwargs": {}}, "c": 2}
    assert known(defaults, "a.b") and known(defaults, "a.kwargs.anything") and known(defaults, "c")
    assert not known(defaults, "a.x") and not known(defaults, "c.d") and not known(defaults, "z")


def test_merge_keeps_a_section_the_top_leaves_blank():
    assert merge({"a": {"b": 1}, "c": 1}, {"a": None, "c": None, "d": 2}) == {"a": {"b": 1}, "c": None, "d": 2}


def test_a_migration_reads_a_number_as_the_type_of_our_default():
    m = Migration({}, {"actor": {"lr": 1e-5, "name": "x"}}, written=set())
    m.set("actor.lr", "1e-6")
    m.set("actor.name", "1e-6")
    m.report("old.key", "why")
    assert m.desired == {"actor.lr": 1e-6, "actor.name": "1e-6"} and m.unmapped == [("old.key", "why")]


def test_a_mapping_over_a_list_is_a_clash_as_a_list_over_a_mapping_is():
    # hypothesis found the first: OmegaConf refuses to merge {"_": {"_": None}} over {"_": []}
    assert shapes_clash({"_": {"_": None}}, {"_": []})
    assert shapes_clash({"_": []}, {"_": {"_": None}})
    assert not shapes_clash({"_": {"_": None}}, {"_": {"x": 1}}) and not shapes_clash({"_": [1]}, {"_": []})
