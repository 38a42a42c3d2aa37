"""The ``hf`` rollout backend (``rollout.name=hf``): plain ``transformers``, for CPU runs and tests.

Importing it registers the backend, also in ``get_rollout_class``'s table, which verl 0.9.1 offers no function for.
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
