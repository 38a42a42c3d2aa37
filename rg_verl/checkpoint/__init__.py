"""Convert a verl FSDP checkpoint (``global_step_N/actor``) into a Hugging Face model folder.

verl's ``FSDPCheckpointManager`` writes, per rank ``r`` of a run with ``W`` ranks:

- ``model_world_size_{W}_rank_{r}.pt``: ``torch.save`` of the rank's ``model.state_dict()``. Under FSDP2
  every entry is a ``DTensor`` (``Shard(dim)`` / ``Replicate`` placements over a device mesh, a 1-device mesh
  when ``W == 1``); under FSDP1 (``SHARDED_STATE_DICT``) every entry is a ``ShardedTensor`` whose local
  shards carry their offsets; anything FSDP did not shard is a plain tensor, replicated on every rank;
- ``optim_*`` / ``extra_state_*`` (ignored here), and on rank 0 ``fsdp_config.json``
  (``{"FSDP_version", "world_size"}``), ``huggingface/`` (config, generation config, tokenizer) and, for
  LoRA runs, ``lora_train_meta.json`` (``r``, ``lora_alpha``, ``task_type``).

The converter reads those files on the CPU without running anything from the pickles, streams the weights
into ``save_pretrained``-style safetensors with peak memory near the largest piece, and publishes the folder
by an atomic rename, so an interrupted run leaves no output folder.

Modules, in the order a conversion uses them:

- :mod:`.errors`: :class:`CheckpointError`, :class:`OutputExistsError`;
- :mod:`.unpickler`: the restricted unpickler: state dicts as plain records, nothing from the pickle run;
- :mod:`.reading`: direct reads of the shard files' zip records, :func:`inspect_checkpoint` /
  :class:`CheckpointInfo`;
- :mod:`.assembly`: DTensor / ShardedTensor placements to full tensors; the open checkpoint;
- :mod:`.lora`: LoRA factors vs. base weights, the PEFT adapter config;
- :mod:`.plan`: output names, LoRA merge or adapter, tied weights, dtype, checks against the config's model;
- :mod:`.writing`: streaming safetensors writes, sharding and index, ``huggingface/`` files, the staging
  folder and its atomic rename;
- :mod:`.verify`: :func:`verify_conversion`, bit-for-bit checks against every rank's shards;
- :mod:`.convert`: :func:`convert_checkpoint`, :class:`ConversionResult`, ``DTYPES``;
- :mod:`.synthetic`: real FSDP checkpoints written over gloo on the CPU, for tests and benchmarks (not
  imported here: it needs verl).

Names without a leading underscore are shared between these modules (``Checkpoint``, ``Source``, ``Plan``,
``Output``, ``ShardFile``, ``TensorRef``...); an underscore marks a name its module keeps to itself. The
package exports the entry points: :func:`convert_checkpoint`, :func:`verify_conversion`,
:func:`inspect_checkpoint`. The command line is :mod:`.cli`, run by ``utils/load_fsdp_to_hf.py`` and
``rg-verl convert``.
"""

from .convert import DEFAULT_MAX_SHARD_SIZE, DTYPES, ConversionResult, convert_checkpoint
from .errors import CheckpointError, OutputExistsError
from .lora import ADAPTER_DIR
from .reading import CheckpointInfo, inspect_checkpoint
from .verify import verify_conversion
from .writing import parse_size

__all__ = [
    "ADAPTER_DIR",
    "DEFAULT_MAX_SHARD_SIZE",
    "DTYPES",
    "CheckpointError",
    "CheckpointInfo",
    "ConversionResult",
    "OutputExistsError",
    "convert_checkpoint",
    "inspect_checkpoint",
    "parse_size",
    "verify_conversion",
]
