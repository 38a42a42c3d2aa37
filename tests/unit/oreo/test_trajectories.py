"""Tests of rg_verl.oreo.trajectories: shards written and read back, OREO's balancing rule, the loader's errors."""

from __future__ import annotations

import json
import logging
import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rg_verl.common.schema import ConfigError
from rg_verl.common.tokenizer import tokenizer_fingerprint
from rg_verl.oreo.trajectories import (
    MANIFEST,
    METADATA_KEY,
    Trajectory,
    balance,
    load_trajectories,
    shard_name,
    write_shard,
)


class FakeTokenizer:
    """What tokenizer_fingerprint reads: a vocabulary, special tokens, a chat template."""

    def __init__(self, vocab=None, template="{{ messages }}", eos="</s>", pad=None):
        self.vocab = dict(vocab or {"a": 0, "b": 1, "</s>": 2})
        self.chat_template, self.eos_token, self.pad_token = template, eos, pad
        self.bos_token = self.unk_token = None
        self.all_special_tokens = [eos] + ([pad] if pad else [])

    def get_vocab(self):
        return dict(self.vocab)


FINGERPRINT = tokenizer_fingerprint(FakeTokenizer())


def row(index: int, sample_idx: int, accuracy: float = 0.0, score: float | None = None, **extra) -> dict:
    """A stored completion of item ``index`` (prompt 3 ids + index, response 2 ids + sample_idx)."""
    return {
        "uid": f"train/{index}", "split": "train", "index": index, "sample_idx": sample_idx,
        "data_source": "reasoning_gym/chain_sum", "prompt": json.dumps([{"role": "user", "content": str(index)}]),
        "prompt_ids": [5, 6, 7] + [8] * index, "response": "xy", "response_ids": [9, 10] + [11] * sample_idx,
        "ids_source": "backend", "finished": True, "score": accuracy if score is None else score,
        "accuracy": accuracy, "format_ok": 1.0, **extra,
    }  # fmt: skip


def shard(path, rows, fingerprint=FINGERPRINT):
    write_shard(path, rows, {"split": "train", "tokenizer_fingerprint": fingerprint})
    return path


@pytest.fixture
def collection(tmp_path):
    """A split folder of two shards: items 0-1 and item 2, three samples each."""
    folder = tmp_path / "train"
    shard(folder / shard_name(0), [row(i, j, accuracy=float(j == 0)) for i in range(2) for j in range(3)])
    shard(folder / shard_name(1), [row(2, j, accuracy=1.0) for j in range(3)])
    return folder


# ---- reading back


def test_rows_come_back_as_trajectories_in_order(collection):
    rows = load_trajectories(collection, reward_key="score", reward_mul=2.0, reward_add=-1.0)
    assert [(t.uid, t.sample_idx) for t in rows] == [(f"train/{i}", j) for i in range(3) for j in range(3)]
    first = rows[0]
    assert first == Trajectory(
        uid="train/0", split="train", index=0, sample_idx=0, data_source="reasoning_gym/chain_sum",
        prompt_ids=(5, 6, 7), response_ids=(9, 10), reward=1.0, accuracy=1.0, finished=True,
        prompt=json.dumps([{"role": "user", "content": "0"}]), response="xy",
    )  # fmt: skip
    assert [t.reward for t in rows[:3]] == [1.0, -1.0, -1.0]  # score * 2 - 1
    single = load_trajectories(collection / shard_name(1))
    assert [t.uid for t in single] == ["train/2"] * 3
    both = load_trajectories([collection / shard_name(1), collection / shard_name(0)])
    assert [t.index for t in both] == [2] * 3 + [0] * 3 + [1] * 3  # the order given


def test_every_reward_column_is_kept_and_selectable(tmp_path):
    path = shard(tmp_path / "s.parquet", [row(0, 0, **{"term/format": 0.5}), row(0, 1)])
    table = pq.read_table(path)
    assert table.column_names[-4:] == ["score", "accuracy", "format_ok", "term/format"]
    assert table.column("term/format").to_pylist() == [0.5, None]  # a value a row lacks is null
    assert [t.reward for t in load_trajectories(path, reward_key="format_ok")] == [1.0, 1.0]
    with pytest.raises(ConfigError, match=r"sample 1: term/format is None"):
        load_trajectories(path, reward_key="term/format")


def test_max_length_drops_long_trajectories_with_one_warning(collection, caplog):
    with caplog.at_level(logging.WARNING):
        rows = load_trajectories(collection, max_length=6)  # prompt 3 + index, response 2 + sample_idx
    assert {(t.index, t.sample_idx) for t in rows} == {(0, 0), (0, 1), (1, 0)}
    assert [r.getMessage() for r in caplog.records] == ["dropped 6 of 9 trajectories longer than max_length 6"]
    with pytest.raises(ConfigError, match="max_length: all 9 trajectories are longer than 4; raise it"):
        load_trajectories(collection, max_length=4)


def test_balance_applies_oreos_rule_at_load_time(collection):
    rows = load_trajectories(collection, balance=1)
    # item 0, 1: one right (sample 0), two wrong -> 1 wrong, 1 right; item 2: three right -> one right
    assert [(t.index, t.sample_idx) for t in rows] == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0)]


def test_permuted_rewards_are_a_seeded_shuffle(collection):
    plain = load_trajectories(collection, reward_key="score")
    permuted = load_trajectories(collection, reward_key="score", permute_seed=3)
    assert permuted == load_trajectories(collection, reward_key="score", permute_seed=3)
    assert sorted((t.reward, t.accuracy) for t in permuted) == sorted((t.reward, t.accuracy) for t in plain)
    assert [(t.uid, t.sample_idx, t.response_ids) for t in permuted] == [
        (t.uid, t.sample_idx, t.response_ids) for t in plain
    ]
    shuffles = {tuple(t.reward for t in load_trajectories(collection, permute_seed=s)) for s in range(6)}
    assert len(shuffles) > 1


# ---- the tokenizer fingerprint


def test_tokenizer_fingerprint_follows_vocab_specials_and_template_not_padding():
    assert tokenizer_fingerprint(FakeTokenizer()) == FINGERPRINT
    assert tokenizer_fingerprint(FakeTokenizer(pad="</s>")) == FINGERPRINT  # a trainer's pad = eos
    assert tokenizer_fingerprint(FakeTokenizer(template="other")) != FINGERPRINT
    assert tokenizer_fingerprint(FakeTokenizer(vocab={"a": 1, "b": 0, "</s>": 2})) != FINGERPRINT
    assert tokenizer_fingerprint(FakeTokenizer(eos="a")) != FINGERPRINT


def test_tokenizer_fingerprint_of_a_real_tokenizer_is_stable(tiny_model):
    from transformers import AutoTokenizer

    first, second = AutoTokenizer.from_pretrained(tiny_model), AutoTokenizer.from_pretrained(tiny_model)
    second.pad_token = second.eos_token
    assert tokenizer_fingerprint(first) == tokenizer_fingerprint(second)
    second.chat_template = second.chat_template + " "
    assert tokenizer_fingerprint(first) != tokenizer_fingerprint(second)


def test_tokenizer_mismatch_names_the_file_and_the_fix(collection):
    assert len(load_trajectories(collection, tokenizer=FakeTokenizer())) == 9
    with pytest.raises(ConfigError, match=r"trajectories-00000.parquet was tokenised with another tokenizer.*"
                                          r"collect again with the policy's tokenizer"):  # fmt: skip
        load_trajectories(collection, tokenizer=FakeTokenizer(template="other"))


def test_fingerprint_falls_back_to_the_manifest_and_must_exist(tmp_path):
    folder = tmp_path / "out" / "train"
    folder.mkdir(parents=True)
    table = pa.Table.from_pylist([row(0, 0)])  # no metadata of ours
    pq.write_table(table, folder / shard_name(0))
    with pytest.raises(ConfigError, match="records no tokenizer fingerprint"):
        load_trajectories(folder, tokenizer=FakeTokenizer())
    assert load_trajectories(folder)  # without a tokenizer nothing is checked
    (tmp_path / "out" / MANIFEST).write_text(json.dumps({"tokenizer_fingerprint": FINGERPRINT}))
    assert len(load_trajectories(folder, tokenizer=FakeTokenizer())) == 1


# ---- errors: each a ConfigError naming the file and the fix


def test_missing_paths_and_folders_without_shards(tmp_path, collection):
    with pytest.raises(ConfigError, match=r"nowhere does not exist; give a collection's split folder"):
        load_trajectories(tmp_path / "nowhere")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigError, match=r"empty holds no parquet files; collect it again"):
        load_trajectories(empty)
    (collection.parent / MANIFEST).write_text("{}")
    with pytest.raises(ConfigError, match=r"give one of its split folders, e.g. <out>/train"):
        load_trajectories(collection.parent)


def test_corrupt_empty_and_rowless_files(tmp_path):
    garbage = tmp_path / "garbage.parquet"
    garbage.write_bytes(b"PAR1 this is not parquet at all \x00\x01\x02" * 10)
    with pytest.raises(ConfigError, match=r"garbage.parquet is not a readable parquet file .*delete it and collect"):
        load_trajectories(garbage)
    empty = tmp_path / "empty.parquet"
    empty.write_bytes(b"")
    with pytest.raises(ConfigError, match=r"empty.parquet is empty \(0 bytes\); delete it and collect"):
        load_trajectories(empty)
    rowless = tmp_path / "rowless.parquet"
    pq.write_table(pq.read_table(shard(tmp_path / "one.parquet", [row(0, 0)])).slice(0, 0), rowless)
    with pytest.raises(ConfigError, match=r"rowless.parquet holds no trajectories"):
        load_trajectories(rowless)


def test_missing_columns_and_unknown_reward_key(tmp_path):
    path = shard(tmp_path / "s.parquet", [row(0, 0)])
    pq.write_table(pq.read_table(path).drop_columns(["response_ids", "accuracy"]), tmp_path / "cut.parquet")
    with pytest.raises(ConfigError, match=r"cut.parquet lacks the columns response_ids, accuracy; it is not"):
        load_trajectories(tmp_path / "cut.parquet")
    with pytest.raises(ConfigError, match=r"reward_key: 'correct' is not a reward column of .*s.parquet; "
                                          r"available: score, accuracy, format_ok"):  # fmt: skip
        load_trajectories(path, reward_key="correct")
    with pytest.raises(ConfigError, match="reward_key: 'index' is not a reward column"):
        load_trajectories(path, reward_key="index")


def test_non_finite_rewards_empty_ids_and_repeated_rows(tmp_path):
    nan = shard(tmp_path / "nan.parquet", [row(0, 0, score=math.nan)])
    with pytest.raises(ConfigError, match=r"nan.parquet, train/0 sample 0: score is nan, not a finite number"):
        load_trajectories(nan, reward_key="score")
    inf = shard(tmp_path / "inf.parquet", [row(0, 0)])
    with pytest.raises(ConfigError, match=r"accuracy \* 1.0 \+ inf is inf, not a finite number"):
        load_trajectories(inf, reward_add=math.inf)
    empty = shard(tmp_path / "ids.parquet", [{**row(0, 0), "response_ids": []}])
    with pytest.raises(ConfigError, match=r"ids.parquet, train/0: response_ids is empty"):
        load_trajectories(empty)
    good = shard(tmp_path / "good.parquet", [row(0, 0)])
    with pytest.raises(ConfigError, match=r"train/0 sample 0 is in both .*good.parquet and .*good.parquet"):
        load_trajectories([good, good])


# ---- OREO's balancing rule


rows_strategy = st.lists(
    st.tuples(st.integers(0, 3), st.integers(0, 15), st.sampled_from([0.0, 1.0, 0.5])),
    max_size=40,
    unique_by=lambda t: (t[0], t[1]),
)


@settings(max_examples=200, deadline=None)
@given(rows_strategy, st.integers(1, 5), st.randoms())
def test_balance_keeps_the_lowest_samples_within_oreos_limits(raw, m, rnd):
    rows = [{"uid": f"train/{u}", "sample_idx": s, "accuracy": a} for u, s, a in raw]
    kept = balance(rows, m)
    assert kept == [r for r in rows if r in kept]  # a sub-list, in input order
    shuffled = rows[:]
    rnd.shuffle(shuffled)
    assert sorted(map(repr, balance(shuffled, m))) == sorted(map(repr, kept))  # order-independent
    for uid in {r["uid"] for r in rows}:
        right = sorted(r["sample_idx"] for r in rows if r["uid"] == uid and r["accuracy"] == 1)
        wrong = sorted(r["sample_idx"] for r in rows if r["uid"] == uid and r["accuracy"] != 1)
        kept_right = sorted(r["sample_idx"] for r in kept if r["uid"] == uid and r["accuracy"] == 1)
        kept_wrong = sorted(r["sample_idx"] for r in kept if r["uid"] == uid and r["accuracy"] != 1)
        assert len(kept_right) <= m and len(kept_wrong) <= m
        assert len(kept_right) <= max(len(kept_wrong), 1)
        assert kept_wrong == wrong[:m]  # as many wrong ones as allowed, the lowest sample_idx first
        assert kept_right == right[: min(m, max(len(kept_wrong), 1))]


def test_balance_works_on_trajectories_and_refuses_a_bad_m():
    rows = [
        Trajectory(f"train/{i}", "train", i, j, "x", (1,), (2,), reward=a, accuracy=a, finished=True)
        for i, accs in enumerate([[1, 1, 1], [0, 1, 0, 1]])
        for j, a in enumerate(accs)
    ]
    assert [(t.index, t.sample_idx) for t in balance(rows, 4)] == [(0, 0), (1, 0), (1, 1), (1, 2), (1, 3)]
    for m in (0, -1, 1.5, True):
        with pytest.raises(ConfigError, match="balance: .* is not a positive number"):
            balance(rows, m)


def test_shard_metadata_is_recorded(tmp_path):
    path = shard(tmp_path / "s.parquet", [row(0, 0)])
    metadata = json.loads(pq.read_schema(path).metadata[METADATA_KEY.encode()])
    assert metadata == {"split": "train", "tokenizer_fingerprint": FINGERPRINT}
    assert [p.name for p in tmp_path.iterdir()] == ["s.parquet"]  # no temporary file left behind
