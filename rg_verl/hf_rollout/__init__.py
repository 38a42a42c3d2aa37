"""The ``hf`` rollout backend: generation with plain ``transformers``, on any device.

Selected with ``actor_rollout_ref.rollout.name=hf``; ``rg_verl.grpo.launch`` loads this package in
every Ray process only then. It exists for the CPU demo and tests, and for debugging a config on
a machine without vLLM. It is small and slow by design: use vLLM for real training.

Importing this package registers the backend with verl in the two places verl looks a rollout
up: the replica registry (driver side, public) and the server-adapter table that
``verl.workers.rollout.base.get_rollout_class`` reads (worker side). verl 0.9.1 offers no
registration function for the latter, so the entry is added to that table directly.
"""

import verl.workers.rollout.base as rollout_base
from verl.workers.rollout.replica import RolloutReplicaRegistry

NAME = "hf"


def _load_replica():
    # deliberately lazy: verl's registry takes a loader, so the replica (Ray actor, server) loads when chosen
    from rg_verl.hf_rollout.replica import HFReplica

    return HFReplica


RolloutReplicaRegistry.register(NAME, _load_replica)
rollout_base._ROLLOUT_REGISTRY[(NAME, "async")] = "rg_verl.hf_rollout.replica.HFServerAdapter"
