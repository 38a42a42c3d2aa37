"""Trajectories as the batches verl's engines take: nested tensors, a row (prompt + response ids) each.

Response column t is the state before response token t; the epoch order is a pure function of (seed, epoch).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDict
from verl.utils import tensordict_utils as tu
from verl.workers.utils.padding import response_from_nested

from rg_verl.oreo.trajectories import Trajectory

__all__ = [
    "SEQUENCE_FIELDS", "BatchPlan", "chunks", "engine_batch", "nested", "step_starts", "unbind_responses",
]  # fmt: skip

# the fields every row carries (the engine's, then OREO's); old_log_probs and values are added per step
SEQUENCE_FIELDS = (
    "input_ids", "position_ids", "loss_mask", "prompts", "responses", "response_mask", "returns", "step_start",
)  # fmt: skip


def step_starts(response_ids: Sequence[int], tokenizer: Any, delimiters: Sequence[str] | None) -> list[float]:
    """1.0 where response token t starts a reasoning step (after a token holding a delimiter; every token without)."""
    if delimiters is None:
        return [1.0] * len(response_ids)
    starts, new_step = [], True
    for token in response_ids:
        starts.append(1.0 if new_step else 0.0)
        text = tokenizer.decode([token])
        new_step = any(d and d in text for d in delimiters)
    return starts


def _row(trajectory: Trajectory, starts: Sequence[float]) -> dict[str, torch.Tensor]:
    prompt = torch.tensor(trajectory.prompt_ids, dtype=torch.long)
    response = torch.tensor(trajectory.response_ids, dtype=torch.long)
    n_prompt, n_response = len(prompt), len(response)
    return {
        "input_ids": torch.cat([prompt, response]),
        "position_ids": torch.arange(n_prompt + n_response),
        "loss_mask": torch.cat([torch.zeros(n_prompt, dtype=torch.long), torch.ones(n_response, dtype=torch.long)]),
        "prompts": prompt,
        "responses": response,
        "response_mask": torch.ones(n_response, dtype=torch.long),
        "returns": torch.full((n_response,), float(trajectory.reward)),
        "step_start": torch.tensor(starts, dtype=torch.float32),
    }


def nested(rows: Sequence[torch.Tensor]) -> torch.Tensor:
    """A jagged nested tensor of 1-D rows (the layout verl's no-padding engines take)."""
    return torch.nested.as_nested_tensor(list(rows), layout=torch.jagged)


def engine_batch(
    trajectories: Sequence[Trajectory],
    starts: Sequence[Sequence[float]],
    extra: dict[str, Sequence[torch.Tensor]] | None = None,
    **meta: Any,
) -> TensorDict:
    """The engine batch of ``trajectories``: :data:`SEQUENCE_FIELDS`, ``extra`` response-length fields and ``meta``."""
    rows = [_row(t, s) for t, s in zip(trajectories, starts, strict=True)]
    tensors = {name: nested([row[name] for row in rows]) for name in SEQUENCE_FIELDS}
    for name, values in (extra or {}).items():
        tensors[name] = nested(values)
    return tu.get_tensordict(
        tensor_dict=tensors, non_tensor_dict={"temperature": 1.0, "pad_mode": "no_padding", **meta}
    )


def unbind_responses(output: torch.Tensor, response_lengths: Sequence[int]) -> list[torch.Tensor]:
    """The response part (s_t at column t) of each row of a whole-row output, by verl's ``response_from_nested``."""
    if not output.is_nested:  # a dense [B, j] output of whole rows of one length
        output = nested(list(output))
    mask = nested([torch.ones(n, dtype=torch.long) for n in response_lengths])
    return [row.detach().float().cpu() for row in response_from_nested(output, mask).unbind()]


class BatchPlan:
    """Which trajectories make each step's batch (a permutation of ``seed + epoch``), and which this rank takes."""

    def __init__(self, size: int, global_batch: int, seed: int, shuffle: bool, rank: int = 0, ranks: int = 1):
        if size < global_batch:
            raise ValueError(
                f"data.train_batch_size: {global_batch} trajectories per step, but the training files hold {size}; "
                "collect more or lower the batch size"
            )
        self.size, self.global_batch, self.seed, self.shuffle = size, global_batch, seed, shuffle
        self.rank, self.ranks = rank, ranks
        self.steps_per_epoch = size // global_batch

    def order(self, epoch: int) -> list[int]:
        if not self.shuffle:
            return list(range(self.size))
        generator = torch.Generator().manual_seed(self.seed + epoch)
        return torch.randperm(self.size, generator=generator).tolist()

    def batch(self, global_step: int) -> tuple[int, list[int]]:
        """(epoch, every rank's trajectory indices) of 0-based ``global_step``."""
        epoch, position = divmod(global_step, self.steps_per_epoch)
        return epoch, self.order(epoch)[position * self.global_batch : (position + 1) * self.global_batch]

    def step(self, global_step: int) -> tuple[int, list[int]]:
        """(epoch, this rank's trajectory indices) of 0-based ``global_step``."""
        epoch, batch = self.batch(global_step)
        return epoch, batch[self.rank :: self.ranks]


def chunks(indices: Sequence[int], size: int, rank: int = 0, ranks: int = 1) -> list[list[int]]:
    """``indices`` in chunks of ``size`` per rank, as many on every rank (FSDP needs every rank in every forward)."""
    if not indices:
        return []
    per_round = size * ranks
    rounds = -(-len(indices) // per_round)
    padded = list(indices) + [indices[-1]] * (rounds * per_round - len(indices))
    return [padded[(k * ranks + rank) * size : (k * ranks + rank + 1) * size] for k in range(rounds)]
