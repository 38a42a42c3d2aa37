"""Tests for rg_verl.hf_rollout.prefix_cache: lookup by the longest stored prefix, the byte bound, and the batch
cache's layout (each row's own tokens right-aligned, zeros before them). The server's use of it, checked against a
cache-free forward pass, is in test_hf_rollout.py."""

from __future__ import annotations

import torch
from hypothesis import given
from hypothesis import strategies as st
from transformers import DynamicCache

from rg_verl.hf_rollout.prefix_cache import PrefixCache

LAYERS, HEADS, HEAD_DIM = 2, 1, 3


def generated_cache(rows: list[list[int]], width: int) -> DynamicCache:
    """A cache as ``generate`` leaves it for left-padded rows: the value at a row's token column is the token id."""
    keys = torch.zeros((len(rows), HEADS, width, HEAD_DIM))
    for r, tokens in enumerate(rows):
        keys[r, :, width - len(tokens) :] = torch.tensor(tokens, dtype=torch.float)[None, :, None]
    return DynamicCache(ddp_cache_data=[(keys.clone(), -keys.clone()) for _ in range(LAYERS)])


def stored(cache: PrefixCache, *rows: list[int]) -> PrefixCache:
    width = max(map(len, rows))
    cache.store(generated_cache(list(rows), width), list(rows), [width - len(r) for r in rows])
    return cache


def entry_bytes(tokens: int) -> int:
    return LAYERS * 2 * HEADS * tokens * HEAD_DIM * 4


def test_lookup_takes_the_longest_stored_prefix_and_leaves_the_last_token():
    cache = stored(PrefixCache(), [1, 2], [1, 2, 3, 4], [9, 9, 9])
    assert cache.lookup([1, 2, 3, 4, 5, 6]) == ((1, 2, 3, 4), 4)
    assert cache.lookup([1, 2, 3, 7]) == ((1, 2), 2)  # [1, 2, 3, 4] is not a prefix
    assert cache.lookup([1, 2, 3, 4]) == ((1, 2, 3, 4), 3)  # the last token is prefilled for its logits
    assert cache.lookup([5, 1, 2]) == (None, 0)


def test_batch_cache_right_aligns_each_rows_tokens_and_uses_an_entry_once():
    cache = stored(PrefixCache(), [1, 2, 3], [4, 5, 6, 7, 8])
    prompts = [[1, 2, 3, 10, 11], [4, 5, 6, 7, 8, 12], [20, 21]]  # two continuations and a new prompt
    batch = cache.batch_cache(prompts, width=6, like=torch.zeros(()))
    # the new prompt needs both its tokens prefilled, so every row keeps 2 new tokens: 4 cached columns
    keys = batch.layers[0].keys[:, 0, :, 0]
    assert keys.tolist() == [[0, 1, 2, 3], [4, 5, 6, 7], [0, 0, 0, 0]]
    assert torch.equal(batch.layers[1].values, -batch.layers[1].keys)
    assert len(cache) == 0  # each continuation stores its longer sequence after generating


def test_no_cache_when_a_new_prompt_fills_the_width():
    cache = stored(PrefixCache(), [1, 2, 3])
    assert cache.batch_cache([[7, 8, 9, 6], [1, 2, 3, 4]], width=4, like=torch.zeros(())) is None
    assert len(cache) == 1  # unused, so kept


def test_the_least_recently_stored_entries_go_first_past_the_byte_bound():
    cache = PrefixCache(max_bytes=entry_bytes(7))
    stored(cache, [1, 2, 3])
    stored(cache, [4, 5, 6])
    assert len(cache) == 2
    stored(cache, [7, 8])  # 8 tokens in all: the oldest goes
    assert cache.lookup([1, 2, 3, 0]) == (None, 0)
    assert cache.lookup([4, 5, 6, 0])[1] == 3 and cache.lookup([7, 8, 0])[1] == 2
    stored(cache, list(range(100, 108)))  # larger than the bound alone: not kept, nothing evicted for it
    assert len(cache) == 2
    cache.clear()
    assert len(cache) == 0


@given(st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=6), min_size=1, max_size=5),
       st.lists(st.integers(0, 3), min_size=1, max_size=8))  # fmt: skip
def test_lookup_returns_a_true_prefix_of_the_prompt(rows, prompt):
    cache = stored(PrefixCache(), *rows)
    key, used = cache.lookup(prompt)
    if key is None:
        assert used == 0
        assert len(prompt) == 1 or not any(prompt[: len(r)] == r for r in rows)
    else:
        assert prompt[: len(key)] == list(key) and 1 <= used <= len(prompt) - 1 and used <= len(key)
        assert all(min(len(r), len(prompt) - 1) <= used for r in rows if prompt[: len(r)] == r)
