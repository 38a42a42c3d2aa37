"""Tests for rg_verl.data.search_cache: stored held-out searches change no item and skip the candidates before it."""

import logging
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from omegaconf import OmegaConf

from rg_verl.data import candidates as candidates_module
from rg_verl.data import search_cache as cache_module
from rg_verl.data.dataset import ReasoningGymDataset
from rg_verl.data.holdout import split_of
from rg_verl.data.search_cache import NOT_FOUND, SearchCache, read_lines, space_key

MIX = {"chain_sum": {"config": {"min_terms": 2, "max_terms": 4}}, "lcm": {}}
# tower_of_hanoi with one disk and one peg layout has a handful of questions, none in the val share
ONLY_TRAIN_QUESTIONS = {"min_disks": 3, "max_disks": 3, "min_pegs": 3, "max_pegs": 3}


# one candidate for each generator's probe (its item 0, which item 0 of the split reuses) and for each of the
# other 29 items of a 30-item split
ONE_EACH = 2 + 29


def make(datasets=MIX, split="val", size=30, seed=7):
    section = {"datasets": datasets, "seed": seed, "train_size": size, "val_size": size, "eval_size": size}
    return ReasoningGymDataset(f"reasoning_gym://{split}", None, OmegaConf.create({"reasoning_gym": section}))


def hashes(dataset) -> list[str]:
    return [dataset[i]["extra_info"]["question_hash"] for i in range(len(dataset))]


@pytest.fixture
def generated(monkeypatch):
    """The candidates generated (generator, attempt, index), in order."""
    calls = []
    original = candidates_module.Candidates.item

    def counted(self, attempt, index):
        calls.append((self.name, attempt, index))
        return original(self, attempt, index)

    monkeypatch.setattr(candidates_module.Candidates, "item", counted)
    return calls


def stored_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.txt"))


@pytest.mark.parametrize("split", ["val", "eval"])
def test_a_stored_search_gives_the_same_item_from_one_candidate(split, search_cache, generated):
    first = hashes(make(split=split))
    searched = len(generated)
    assert searched > 5 * 30  # a held-out item costs about 20 candidates
    assert [p.name.split("-")[:2] for p in stored_files(search_cache)] == [["chain_sum", split], ["lcm", split]]
    generated.clear()
    assert hashes(make(split=split)) == first
    assert len(generated) == ONE_EACH
    assert all(split_of(h) for h in first)


def test_without_a_cache_every_run_searches(monkeypatch, search_cache, generated):
    monkeypatch.setenv(cache_module.ENV, "off")
    first = hashes(make())
    searched = len(generated)
    generated.clear()
    assert hashes(make()) == first and len(generated) == searched  # the negative control: nothing kept
    assert stored_files(search_cache) == []


def test_training_searches_are_not_kept(search_cache):
    make(split="train")[3]
    assert stored_files(search_cache) == []


def test_the_cache_does_not_change_items(monkeypatch, search_cache):
    """Items with a warm cache, a cold one and none at all are the same, whatever the seed."""
    for seed in (0, 123, 10**9 - 1):
        monkeypatch.setenv("RG_VERL_SEARCH_CACHE", "off")
        uncached = hashes(make(seed=seed, size=12))
        monkeypatch.setenv("RG_VERL_SEARCH_CACHE", str(search_cache))
        assert hashes(make(seed=seed, size=12)) == uncached  # cold
        assert hashes(make(seed=seed, size=12)) == uncached  # warm


def test_a_stale_line_is_searched_again_and_replaced(search_cache, generated):
    first = hashes(make())
    for path in stored_files(search_cache):
        # every stored search now names the wrong candidate, and a wrong hash (a changed generator)
        lines = path.read_text().splitlines()
        wrong = [line if line.startswith("#") else f"{line.split()[0]} 0 {'0' * 16}" for line in lines]
        path.write_text("\n".join(wrong) + "\n")
    generated.clear()
    assert hashes(make()) == first
    assert len(generated) > 5 * 30  # searched again
    generated.clear()
    assert hashes(make()) == first and len(generated) == ONE_EACH  # and stored again


def test_torn_and_foreign_lines_are_skipped(tmp_path):
    path = tmp_path / "x.txt"
    good = b'# {"a": 1}\n0 3 0123456789abcdef\n1 -1 -\n'
    path.write_bytes(good + b"2 x y\n3 4 -\n4 -1 0123456789abcdef\n\xff\xfe\n5 2 01234")  # the last line is torn
    assert read_lines(path) == {0: (3, "0123456789abcdef"), 1: (NOT_FOUND, None)}
    assert read_lines(tmp_path / "missing.txt") == {}


@given(st.text())
def test_reading_any_text_never_fails(text):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "x.txt"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        found = read_lines(path)
    assert all(index >= 0 and (attempt >= 0) == (digest is not None) for index, (attempt, digest) in found.items())


@given(st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 404), st.binary(min_size=8, max_size=8)), max_size=20))
def test_recorded_lines_read_back(records):
    key = space_key("chain_sum", {}, 1, 10**8, 3, "val")
    with tempfile.TemporaryDirectory() as folder:
        cache = SearchCache(key, Path(folder), None)
        for index, attempt, digest in records:
            cache.record(index, attempt, digest.hex())
        cache.record(10**7, NOT_FOUND, None)
        again = SearchCache(key, Path(folder), None)
    assert again.found == cache.found


def test_a_space_that_holds_no_held_out_question_is_stored_too(search_cache, generated, caplog):
    with caplog.at_level(logging.WARNING):
        assert make({"tower_of_hanoi": {"config": ONLY_TRAIN_QUESTIONS}, "chain_sum": {}}).unreachable == [
            "tower_of_hanoi"
        ]
    assert sum(name == "tower_of_hanoi" for name, _, _ in generated) == 405
    generated.clear()
    dataset = make({"tower_of_hanoi": {"config": ONLY_TRAIN_QUESTIONS}, "chain_sum": {}})
    assert dataset.unreachable == ["tower_of_hanoi"]
    assert not any(name == "tower_of_hanoi" for name, _, _ in generated)


def test_each_space_has_its_own_file(search_cache):
    base = dict(name="chain_sum", config={"min_terms": 2}, seed=1, size=10, stride=2 * 10**6, split="val")
    names = {cache_module.file_name(space_key(**base))}
    for field, value in [("config", {"min_terms": 3}), ("seed", 2), ("size", 11), ("split", "eval"), ("stride", 5)]:
        names.add(cache_module.file_name(space_key(**{**base, field: value})))
    assert len(names) == 6


def test_generators_that_follow_the_hash_seed_are_kept_per_hash_seed(monkeypatch):
    fields = dict(name="knight_swap", config={}, seed=1, size=10, stride=2 * 10**6, split="val")
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    assert space_key(**fields) is None
    monkeypatch.setenv("PYTHONHASHSEED", "0")
    zero = space_key(**fields)
    monkeypatch.setenv("PYTHONHASHSEED", "1")
    assert zero is not None and cache_module.file_name(zero) != cache_module.file_name(space_key(**fields))
    assert space_key(**{**fields, "name": "chain_sum"})["python_hash_seed"] is None


def test_dataloader_workers_add_to_the_same_files(search_cache, generated):
    dataset = make()
    loader = torch.utils.data.DataLoader(dataset, batch_size=5, num_workers=2, collate_fn=lambda batch: batch)
    first = [item["extra_info"]["question_hash"] for batch in loader for item in batch]
    generated.clear()
    assert hashes(make()) == first and len(generated) == ONE_EACH  # every worker's searches were kept


def test_a_cache_that_cannot_be_written_is_warned_about_once(monkeypatch, tmp_path, caplog, generated):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    monkeypatch.setenv("RG_VERL_SEARCH_CACHE", str(blocker / "searches"))
    monkeypatch.setattr(cache_module, "_warned", False)
    with caplog.at_level(logging.WARNING):
        first = hashes(make())
    warnings = [r.getMessage() for r in caplog.records if "cannot keep held-out searches" in r.getMessage()]
    assert len(warnings) == 1 and str(blocker / "searches") in warnings[0] and "RG_VERL_SEARCH_CACHE" in warnings[0]
    monkeypatch.setenv("RG_VERL_SEARCH_CACHE", "off")
    assert hashes(make()) == first


def test_shipped_files_are_read_and_never_written(monkeypatch, tmp_path, search_cache, generated):
    shipped = tmp_path / "shipped"
    monkeypatch.setenv("RG_VERL_SEARCH_CACHE", str(shipped))
    first = hashes(make())
    monkeypatch.setattr(cache_module, "SHIPPED", shipped)
    monkeypatch.setenv("RG_VERL_SEARCH_CACHE", str(search_cache))
    before = {p.name: p.read_text() for p in stored_files(shipped)}
    generated.clear()
    assert hashes(make()) == first and len(generated) == ONE_EACH  # from the shipped files
    assert stored_files(search_cache) == []  # nothing new to write
    assert {p.name: p.read_text() for p in stored_files(shipped)} == before
    monkeypatch.setenv("RG_VERL_SEARCH_CACHE", "off")
    generated.clear()
    assert hashes(make()) == first and len(generated) > 5 * 30  # off: every search is made afresh


def test_cache_folder_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("RG_VERL_SEARCH_CACHE", "off")
    assert cache_module.cache_dir() is None
    monkeypatch.setenv("RG_VERL_SEARCH_CACHE", str(tmp_path))
    assert cache_module.cache_dir() == tmp_path
    monkeypatch.delenv("RG_VERL_SEARCH_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_module.cache_dir() == tmp_path / "xdg" / "rg-verl" / "searches"


def test_lines_outside_the_space_are_dropped(tmp_path):
    """A damaged or edited line must not send a search outside its seeds (or build thousands of sets)."""
    key = space_key("chain_sum", {}, 1, 10, 3, "val")
    path = tmp_path / cache_module.file_name(key)
    path.write_text(f"3 404 {'a' * 16}\n4 405 {'b' * 16}\n10 1 {'c' * 16}\n9 -1 -\n")
    assert SearchCache(key, tmp_path, None).found == {3: (404, "a" * 16), 9: (NOT_FOUND, None)}


def test_the_key_names_where_reasoning_gym_came_from(monkeypatch):
    class Installed:
        version = "0.1.25"

        def __init__(self, origin):
            self.origin = origin

        def read_text(self, name):
            return self.origin if name == "direct_url.json" else None

    versions = []
    for origin in (None, '{"url": "file:///src/a"}', '{"url": "file:///src/b"}'):
        monkeypatch.setattr(cache_module.importlib.metadata, "distribution", lambda name, o=origin: Installed(o))
        cache_module.generator_version.cache_clear()
        versions.append(cache_module.generator_version())
    cache_module.generator_version.cache_clear()
    assert versions[0] == "0.1.25" and len(set(versions)) == 3 and all(v.startswith("0.1.25") for v in versions)


def test_the_shipped_searches_passed_over_the_shipped_reference_questions():
    # a validation search's key holds the digest of the reference list: a new list makes every shipped search
    # miss, and a run searches about 20 candidates per item again (the slow check in tests/e2e/test_shipped_searches.py
    # finds that in minutes; this finds it at once)
    stamp = cache_module.SHIPPED / "WITHHELD"
    assert stamp.read_text().strip() == cache_module.withheld_digest(), (
        "rg_verl/data/shipped_searches was written for another reference list: "
        "run PYTHONHASHSEED=0 python utils/ship_searches.py"
    )


def test_the_withheld_digest_follows_the_reference_list_it_reads_now():
    # a digest kept from a test that swapped the list (tests/unit/data/test_dataset.py empties it) failed the check
    # above in a whole-suite run, depending on which tests its worker had run before
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cache_module.reference_questions, "shipped_hashes", frozenset)
        empty = cache_module.withheld_digest()
    assert cache_module.withheld_digest() != empty
    assert cache_module.withheld_digest() == (cache_module.SHIPPED / "WITHHELD").read_text().strip()
