"""The converter's exceptions."""

from __future__ import annotations


class CheckpointError(RuntimeError):
    """The checkpoint cannot be converted: a missing, truncated or inconsistent shard, or bad options."""


class OutputExistsError(CheckpointError, FileExistsError):
    """The output folder exists and ``force`` was not given."""
