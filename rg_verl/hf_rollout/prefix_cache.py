"""Keys and values of earlier requests, kept so that a request which extends one skips its prefill."""

from __future__ import annotations

from collections import OrderedDict

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from rg_verl.hf_rollout.kv_cache import GrowingCache, GrowingLayer

MAX_BYTES = 1 << 30


def plain_layers(cache: DynamicCache) -> bool:
    """Whether every layer keeps all its tokens (a sliding-window layer drops old ones and cannot be reused)."""
    return all(type(layer) in (DynamicLayer, GrowingLayer) for layer in cache.layers)


class PrefixCache:
    """Per-sequence keys and values, looked up by the longest stored prefix of a prompt."""

    def __init__(self, max_bytes: int = MAX_BYTES):
        self.max_bytes = max_bytes
        self._entries: OrderedDict[tuple[int, ...], torch.Tensor] = OrderedDict()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0

    def lookup(self, prompt_ids: list[int]) -> tuple[tuple[int, ...] | None, int]:
        """(the key of the longest stored sequence that starts ``prompt_ids``, how many of its tokens to use)."""
        best, best_length = None, 0
        for key in self._entries:
            length = min(len(key), len(prompt_ids) - 1)
            if length <= best_length or len(key) > len(prompt_ids) or prompt_ids[len(key) - 1] != key[-1]:
                continue  # the last token's check rules out most entries before the whole comparison
            if tuple(prompt_ids[: len(key)]) == key:
                best, best_length = key, length
        return best, best_length

    def batch_cache(self, prompts: list[list[int]], width: int, like: torch.Tensor) -> GrowingCache | None:
        """The cache for a left-padded batch of ``width`` columns, or None when no row can use one."""
        found = [self.lookup(p) for p in prompts]
        new_tokens = max(len(p) - used for p, (_, used) in zip(prompts, found, strict=True))
        cached = width - new_tokens  # the columns every row takes from the cache
        if cached <= 0:
            return None
        sample = next(self._entries[key] for key, _ in found if key is not None)
        layers, _, heads, _, head_dim = sample.shape
        data = like.new_zeros((layers, 2, len(prompts), heads, cached, head_dim))
        for row, (prompt, (key, _)) in enumerate(zip(prompts, found, strict=True)):
            take = len(prompt) - new_tokens  # this row's own tokens among the cached columns
            if key is not None and take > 0:
                data[:, :, row, :, cached - take :] = self._entries[key][:, :, :, :take]
        for key in {key for key, _ in found if key is not None}:
            self._drop(key)  # each request stores its longer sequence after generating
        return GrowingCache(ddp_cache_data=[(data[i, 0], data[i, 1]) for i in range(layers)])

    def store(self, cache: DynamicCache, sequences: list[list[int]], starts: list[int]) -> None:
        """Keep row r's keys and values for ``sequences[r]``, which starts at column ``starts[r]`` of ``cache``."""
        if not plain_layers(cache):
            return
        for row, (tokens, start) in enumerate(zip(sequences, starts, strict=True)):
            columns = slice(start, start + len(tokens))
            pairs = [
                torch.stack((layer.keys[row, :, columns], layer.values[row, :, columns])) for layer in cache.layers
            ]
            self._put(tuple(tokens), torch.stack(pairs))  # a copy: the batch's tensors are not kept alive

    def _put(self, key: tuple[int, ...], entry: torch.Tensor) -> None:
        self._drop(key)
        size = entry.numel() * entry.element_size()
        if size > self.max_bytes:
            return
        self._entries[key] = entry
        self._bytes += size
        while self._bytes > self.max_bytes:
            self._drop(next(iter(self._entries)))

    def _drop(self, key: tuple[int, ...]) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._bytes -= entry.numel() * entry.element_size()
