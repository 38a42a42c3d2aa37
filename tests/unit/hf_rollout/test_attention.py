"""Tests for rg_verl.hf_rollout.attention: grouped SDPA gives transformers' ``sdpa`` results on any shapes, masks
and groups, ``generate`` samples the same tokens with it, and the server uses it on a CPU only."""

from __future__ import annotations

import types

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AttentionInterface, AutoModelForCausalLM
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from verl.plugin.platform import get_platform, set_platform

from rg_verl.cpu.platform import PlatformCPU
from rg_verl.cpu.tiny_model import build_tiny_model
from rg_verl.hf_rollout.attention import NAME, attention_for, grouped_sdpa
from rg_verl.hf_rollout.kv_cache import growing_cache_for
from rg_verl.hf_rollout.server import HFRolloutServer


@settings(max_examples=60, deadline=None)
@given(
    batch=st.integers(1, 3),
    kv_heads=st.integers(1, 3),
    groups=st.integers(1, 3),
    queries=st.integers(1, 5),
    past=st.integers(0, 7),
    padding=st.lists(st.integers(0, 4), min_size=3, max_size=3),
    masked=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_grouped_sdpa_matches_transformers_sdpa(batch, kv_heads, groups, queries, past, padding, masked, seed):
    generator = torch.Generator().manual_seed(seed)
    keys_len = past + queries
    query = torch.randn((batch, kv_heads * groups, queries, 8), generator=generator)
    key, value = (torch.randn((batch, kv_heads, keys_len, 8), generator=generator) for _ in range(2))
    mask = None
    if masked:  # causal, with each row's first tokens padding (as transformers' sdpa mask makes it)
        causal = torch.ones((queries, keys_len), dtype=torch.bool).tril(diagonal=past)
        mask = causal.expand(batch, 1, queries, keys_len).clone()
        for row in range(batch):
            mask[row, :, :, : min(padding[row], past)] = False
    module = types.SimpleNamespace(num_key_value_groups=groups, is_causal=True)
    want, _ = sdpa_attention_forward(module, query, key, value, mask, scaling=0.3)
    got, weights = grouped_sdpa(module, query, key, value, mask, scaling=0.3)
    assert weights is None and got.shape == want.shape == (batch, queries, kv_heads * groups, 8)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("attention") / "model", num_heads=4, num_kv_heads=2)


def test_generate_gives_the_same_tokens(model_dir):
    """Left-padded rows of a grouped-query model, prefill and decoding with a cache."""
    ids = torch.randint(10, 200, (3, 24), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[0, :7] = mask[1, :3] = 0
    outputs = []
    for attention in ("sdpa", attention_for(torch.device("cpu"))):
        model = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation=attention).eval()
        assert model.config.num_key_value_heads < model.config.num_attention_heads
        torch.manual_seed(1)
        outputs.append(model.generate(
            input_ids=ids, attention_mask=mask, past_key_values=growing_cache_for(model.config), max_new_tokens=40,
            min_new_tokens=40, do_sample=True, pad_token_id=0, output_logits=True, return_dict_in_generate=True,
        ))  # fmt: skip
    plain, grouped = outputs
    assert torch.equal(plain.sequences, grouped.sequences)
    torch.testing.assert_close(torch.stack(grouped.logits), torch.stack(plain.logits), atol=1e-4, rtol=1e-4)


def test_the_server_uses_it_on_a_cpu_only(model_dir):
    assert attention_for(torch.device("cuda")) == "sdpa"
    assert attention_for(torch.device("cpu")) == NAME and NAME in AttentionInterface()
    previous = get_platform()
    set_platform(PlatformCPU())  # verl's device name would say "cuda"
    try:
        server = HFRolloutServer(str(model_dir), prompt_length=32, response_length=8, max_num_seqs=2, seed=0)
    finally:
        set_platform(previous)
    assert server.model.config._attn_implementation == NAME
