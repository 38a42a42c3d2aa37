"""Tests for rg_verl.hf_rollout.kv_cache: a GrowingCache holds what a DynamicCache holds after any sequence of
appends (and after the operations that replace a layer's tensors), ``generate`` gives the same tokens and logits
with it, and only models whose every layer sees all earlier tokens get one."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoModelForCausalLM, DynamicCache, Qwen2Config

from rg_verl.cpu.tiny_model import build_tiny_model
from rg_verl.hf_rollout.kv_cache import ROOM, GrowingCache, growing_cache_for

BATCH, HEADS, HEAD_DIM = 2, 2, 3


def chunk(tokens: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    keys = torch.randn((BATCH, HEADS, tokens, HEAD_DIM), generator=generator)
    return keys, keys + 1


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(min_value=1, max_value=ROOM + 40), min_size=1, max_size=12),
    st.integers(min_value=0, max_value=11),
    st.sampled_from(["none", "crop", "reorder", "repeat"]),
)
def test_appends_hold_what_a_dynamic_cache_holds(lengths, at, operation):
    growing, dynamic = GrowingCache(num_layers=1), DynamicCache()
    for step, tokens in enumerate(lengths):
        new = chunk(tokens, step)
        got, want = growing.update(*new, layer_idx=0), dynamic.update(*new, layer_idx=0)
        assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))
        if step == at and operation == "crop":  # generate's assisted decoding drops rejected tokens
            growing.crop(growing.get_seq_length() // 2)
            dynamic.crop(dynamic.get_seq_length() // 2)
        elif step == at and operation == "reorder":  # beam search's reordering of the batch
            growing.batch_select_indices(torch.tensor([1, 0]))
            dynamic.batch_select_indices(torch.tensor([1, 0]))
        elif step == at and operation == "repeat":
            growing.batch_repeat_interleave(1)
            dynamic.batch_repeat_interleave(1)
        assert growing.get_seq_length() == dynamic.get_seq_length()
    layer = growing.layers[0]
    assert torch.equal(layer.keys, dynamic.layers[0].keys) and torch.equal(layer.values, dynamic.layers[0].values)


@pytest.mark.parametrize(("reserved", "most_buffers"), [(0, 3), (1010, 1)])
def test_a_long_generation_reallocates_rarely_and_once_with_room_reserved(reserved, most_buffers):
    cache = GrowingCache(num_layers=1)
    cache.reserve(reserved)
    buffers = set()
    cache.update(*chunk(10, 0), layer_idx=0)
    for step in range(1000):
        cache.update(*chunk(1, step + 1), layer_idx=0)
        buffers.add(cache.layers[0]._buffers[0].data_ptr())
    assert cache.get_seq_length() == 1010
    assert len(buffers) <= most_buffers  # unreserved, the room doubles: 266, 532, 1064 tokens
    assert cache.layers[0]._buffers[0].shape[-2] == (1064 if not reserved else reserved)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = build_tiny_model(tmp_path_factory.mktemp("kv") / "model")
    return AutoModelForCausalLM.from_pretrained(path, attn_implementation="sdpa").eval()


@pytest.mark.parametrize("sample", [False, True])
def test_generate_gives_the_same_tokens_and_logits(model, sample):
    """Left-padded rows, past one reallocation of the buffers."""
    ids = torch.randint(10, 200, (3, 20), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[0, :5] = mask[1, :2] = 0
    outputs = []
    for cache in (None, growing_cache_for(model.config)):
        torch.manual_seed(1)
        outputs.append(model.generate(
            input_ids=ids, attention_mask=mask, past_key_values=cache, max_new_tokens=ROOM + 40,
            min_new_tokens=ROOM + 40, do_sample=sample, pad_token_id=0, output_logits=True,
            return_dict_in_generate=True,
        ))  # fmt: skip
    default, growing = outputs
    assert isinstance(growing.past_key_values, GrowingCache)
    assert torch.equal(default.sequences, growing.sequences)
    assert all(torch.equal(d, g) for d, g in zip(default.logits, growing.logits, strict=True))


def test_only_models_whose_layers_see_every_token_get_one(model):
    assert growing_cache_for(model.config) is not None
    small = {"hidden_size": 16, "num_attention_heads": 2, "num_key_value_heads": 1, "intermediate_size": 16}
    assert growing_cache_for(Qwen2Config(num_hidden_layers=2, **small)) is not None
    sliding = Qwen2Config(num_hidden_layers=2, use_sliding_window=True, sliding_window=8, max_window_layers=1, **small)
    assert growing_cache_for(sliding) is None  # its second layer keeps only a window
