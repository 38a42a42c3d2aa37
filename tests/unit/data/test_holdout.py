"""Tests for rg_verl.data.holdout: the split of a question is a stable function of its normalised text."""

from __future__ import annotations

import json
import math
import os
import random
import re
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rg_verl.common.names import SPLIT_SHARES, SPLITS
from rg_verl.data.holdout import normalise, question_hash, question_point, share_bounds, split_of
from tests.helpers import REPO

# every character that str.split() treats as whitespace, ASCII and beyond
WHITESPACE = [" ", "\t", "\n", "\r", "\x0b", "\x0c", "\x1c", "\x1f", "\x85", "\xa0", "\u2003", "\u2028", "\u3000"]
gaps = st.text(alphabet=WHITESPACE, min_size=1, max_size=4)
words = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12).map(normalise).filter(bool)
texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=80)

# Pinned: a training run of an older rg-verl and an evaluation run of this one must split alike, so the hash of
# a text may only change with the salt (a deliberate new version of the rule, which re-splits everything).
GOLDEN = {
    "What is 2 + 2?": ("702664136afd1e5f", "train"),
    "": ("0912962eec26b25a", "train"),
    "é ü 中文": ("6d338b688875042c", "train"),
}


def sample_texts(n: int, seed: int = 0) -> list[str]:
    """``n`` distinct texts, question-like and random, non-ASCII and whitespace included."""
    rng = random.Random(seed)
    alphabet = "abcxyz0123456789 +-*/=?.,\n\téüß中文🙂"
    out = [f"What is {rng.randrange(10**6)} + {rng.randrange(10**6)}? ({i})" for i in range(n // 2)]
    out += ["".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 60))) + f" #{i}" for i in range(n - n // 2)]
    return out


# --- the split depends on the normalised text alone ----------------------------------------------


@given(parts=st.lists(words, min_size=1, max_size=6), data=st.data())
def test_runs_of_whitespace_and_the_ends_do_not_count(parts, data):
    plain = " ".join(parts)
    spaced = data.draw(gaps) + "".join(p + data.draw(gaps) for p in parts)
    assert normalise(spaced) == plain
    assert question_hash(spaced) == question_hash(plain)
    assert split_of(spaced) == split_of(plain)


@given(text=texts)
def test_normalise_is_idempotent_and_leaves_single_spaces(text):
    once = normalise(text)
    assert normalise(once) == once
    assert once == once.strip() and "  " not in once
    assert not any(c in once for c in WHITESPACE if c != " ")
    assert once.split() == text.split()  # only whitespace changes, never a word


@given(text=texts)
def test_hash_point_and_split_agree(text):
    digest = question_hash(text)
    assert re.fullmatch(r"[0-9a-f]{16}", digest)
    point = question_point(text)
    assert 0.0 <= point < 1.0 and point == int(digest, 16) / 2**64
    low, high = share_bounds(split_of(text))
    assert low <= point < high


@given(text=texts)
def test_split_of_reads_the_text_only(text):
    # the same text always gets the same split, and a value is read as its str
    assert split_of(text) == split_of(str(text)) == split_of(text)
    assert split_of(12345) == split_of("12345") and question_hash(12345) == question_hash(" 12345 ")


def test_the_case_and_the_words_do_count():
    base = "What is 2 + 2?"
    variants = [base.lower(), base.upper(), "What is 2 + 3?", "What is 2+2?", base + "!", base.replace("?", "")]
    assert len({question_hash(t) for t in [base, *variants]}) == 1 + len(variants)


def test_distinct_texts_get_distinct_hashes():
    sample = sample_texts(20000)
    assert len({normalise(t) for t in sample}) == len(sample)
    assert len({question_hash(t) for t in sample}) == len(sample)


@pytest.mark.parametrize("text", sorted(GOLDEN))
def test_the_hash_is_pinned(text):
    assert (question_hash(text), split_of(text)) == GOLDEN[text]


# --- shares --------------------------------------------------------------------------------------


def test_share_bounds_partition_the_unit_interval_in_split_order():
    bounds = [share_bounds(split) for split in SPLITS]
    assert bounds[0][0] == 0.0 and bounds[-1][1] == 1.0
    assert all(high == low for (_, high), (low, _) in zip(bounds, bounds[1:], strict=False))
    for split, (low, high) in zip(SPLITS, bounds, strict=True):
        assert high - low == pytest.approx(SPLIT_SHARES[split])
    assert math.isclose(sum(SPLIT_SHARES.values()), 1.0) and list(SPLIT_SHARES) == list(SPLITS)
    assert SPLIT_SHARES["train"] >= 0.9  # training keeps most of every space


@pytest.mark.parametrize("kind", ["sample", "numbered"])
def test_shares_over_many_texts_are_close_to_split_shares(kind):
    n = 40000
    sample = sample_texts(n, seed=1) if kind == "sample" else [f"question {i}" for i in range(n)]
    counts = {split: 0 for split in SPLITS}
    for text in sample:
        counts[split_of(text)] += 1
    for split, share in SPLIT_SHARES.items():
        # a fixed sample: 6 binomial standard deviations (about 260 items for a 5% share of 40,000)
        bound = 6 * math.sqrt(n * share * (1 - share))
        assert abs(counts[split] - n * share) < bound, (kind, counts)


def test_points_are_spread_evenly():
    # finer than the shares: 50 equal bins over 40,000 texts, each within 6 standard deviations
    n, bins = 40000, 50
    counts = [0] * bins
    for text in sample_texts(n, seed=2):
        counts[int(question_point(text) * bins)] += 1
    bound = 6 * math.sqrt(n / bins * (1 - 1 / bins))
    assert all(abs(c - n / bins) < bound for c in counts), counts


# --- across processes ----------------------------------------------------------------------------

SCRIPT = (
    "import json, sys\n"
    "from rg_verl.data.holdout import question_hash, split_of\n"
    "texts = json.load(open(sys.argv[1]))\n"
    "print(json.dumps([[question_hash(t), split_of(t)] for t in texts]))\n"
)


@pytest.mark.parametrize("hash_seed", ["0", "1", "4242"])
def test_split_is_the_same_in_another_process(tmp_path, hash_seed):
    sample = sample_texts(300, seed=3) + sorted(GOLDEN) + ["  What is\t2 + 2?\n"]
    path = tmp_path / "texts.json"
    path.write_text(json.dumps(sample))
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(path)], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout) == [[question_hash(t), split_of(t)] for t in sample]


def test_a_memory_address_in_an_object_repr_does_not_decide_the_split():
    a = "What does it print? <Quadtree object at 0x7f3a2c1d9e50>"
    b = "What does it print? <Quadtree object at 0x7f00deadbeef>"
    assert question_hash(a) == question_hash(b)
    assert question_hash("convert 0x1f to decimal") != question_hash("convert 0x2f to decimal")  # hex numbers count
