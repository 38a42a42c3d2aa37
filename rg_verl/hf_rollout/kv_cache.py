"""A key/value cache for ``generate`` that appends in place instead of copying itself every step."""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import Cache, DynamicLayer

ROOM = 256


class GrowingLayer(DynamicLayer):
    """One layer's keys and values in a preallocated buffer; ``keys``/``values`` view its filled part."""

    def __init__(self):
        super().__init__()
        self.reserved = 0  # tokens the next allocation makes room for at least
        self._buffers: tuple[torch.Tensor, torch.Tensor] | None = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        start = self.get_seq_length()
        end = start + key_states.shape[-2]
        if not self._holds_views() or end > self._buffers[0].shape[-2]:
            self._reallocate(key_states, value_states, room=max(self.reserved, end + ROOM, 2 * start))
        keys, values = self._buffers
        keys[..., start:end, :] = key_states
        values[..., start:end, :] = value_states
        self.keys, self.values = keys[..., :end, :], values[..., :end, :]
        return self.keys, self.values

    def _holds_views(self) -> bool:
        """Whether ``keys``/``values`` are still this layer's views (an outside operation may have replaced them)."""
        if self._buffers is None:
            return False
        return all(
            view.data_ptr() == buffer.data_ptr() and view.shape[:2] == buffer.shape[:2]
            for view, buffer in zip((self.keys, self.values), self._buffers, strict=True)
        )

    def _reallocate(self, key_states: torch.Tensor, value_states: torch.Tensor, room: int) -> None:
        """Fresh buffers of ``room`` tokens holding what the layer has so far."""
        buffers = []
        for held, new in ((self.keys, key_states), (self.values, value_states)):
            batch, heads, _, head_dim = new.shape
            buffer = new.new_empty((batch, heads, room, head_dim))
            if held.numel():
                buffer[..., : held.shape[-2], :] = held
            buffers.append(buffer)
        self._buffers = (buffers[0], buffers[1])


class GrowingCache(DynamicCache):
    """A ``DynamicCache`` of :class:`GrowingLayer` (full-attention models only: no sliding-window layers)."""

    def __init__(self, ddp_cache_data: list[tuple[torch.Tensor, torch.Tensor]] | None = None, num_layers: int = 0):
        layers = [GrowingLayer() for _ in range(len(ddp_cache_data) if ddp_cache_data else num_layers)]
        Cache.__init__(self, layers=layers)
        for layer, (keys, values) in zip(layers, ddp_cache_data or (), strict=False):
            layer.update(keys, values)

    def reserve(self, tokens: int) -> None:
        """Make room for ``tokens`` per row at the next allocation (which then is the last one)."""
        for layer in self.layers:
            layer.reserved = tokens


def growing_cache_for(config) -> GrowingCache | None:
    """An empty :class:`GrowingCache` for a model whose default cache is all ``DynamicLayer``s; else None."""
    layers = DynamicCache(config=config).layers  # transformers' own choice of layer kinds for this model
    if not layers or any(type(layer) is not DynamicLayer for layer in layers):
        return None
    return GrowingCache(num_layers=len(layers))
