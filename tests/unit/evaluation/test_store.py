"""Tests of rg_verl.evaluation.store: items.jsonl survives an interrupted write and never repeats an item."""

from __future__ import annotations

import json

from rg_verl.evaluation.store import ItemStore


def test_a_torn_last_line_is_cut_and_the_first_of_two_records_kept(tmp_path):
    store = ItemStore(tmp_path / "run" / "items.jsonl")
    assert store.load() == {}
    store.append([{"key": "a", "n": 1}, {"key": "b", "n": 2}])
    store.append([])  # nothing to write: the file is left alone
    store.append([{"key": "a", "n": 3}])
    whole = store.path.read_bytes()
    with open(store.path, "ab") as f:
        f.write(b'{"key": "c", "n"')  # a crash mid-write
    assert store.load() == {"a": {"key": "a", "n": 1}, "b": {"key": "b", "n": 2}}
    assert store.path.read_bytes() == whole  # the torn line is gone; the next append starts a clean line
    store.append([{"key": "c", "n": 4}])
    assert [json.loads(line)["key"] for line in store.path.read_text().splitlines()] == ["a", "b", "a", "c"]
