"""Convert a verl FSDP checkpoint (``global_step_N/actor``) into a Hugging Face model folder.

- :mod:`.shards`: the actor folder, each rank's state dict (``torch.load(mmap=True, weights_only=True)``), every
  tensor's pieces and their assembly;
- :mod:`.convert`: :func:`convert_checkpoint` (plan, LoRA, streamed safetensors files, atomic publish) and
  :func:`verify_conversion`;
- :mod:`.cli`: the command line (``utils/load_fsdp_to_hf.py``, ``rg-verl convert``);
- :mod:`.synthetic`: real FSDP checkpoints written over gloo, for tests and benchmarks (not imported here).
"""

from .convert import (
    ADAPTER_DIR, DEFAULT_MAX_SHARD_SIZE, DTYPES, ConversionResult, convert_checkpoint, parse_size, verify_conversion,
)  # fmt: skip
from .shards import CheckpointError, CheckpointInfo, OutputExistsError, inspect_checkpoint

__all__ = [
    "ADAPTER_DIR", "DEFAULT_MAX_SHARD_SIZE", "DTYPES", "CheckpointError", "CheckpointInfo", "ConversionResult",
    "OutputExistsError", "convert_checkpoint", "inspect_checkpoint", "parse_size", "verify_conversion",
]  # fmt: skip
