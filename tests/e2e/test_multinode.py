"""Training across a real two-node Ray cluster (docs/multinode.md): a head and a worker node started with ``ray start``
on this machine, one logical GPU each, and the smoke config with ``trainer.nnodes=2``, then resumed.

No node has two GPUs, so verl's two FSDP ranks can only be placed one per node; each node's own logs show which
rank it ran. The cluster is stopped at the end, also when the test fails (tests/ray_cluster.py).
"""

from __future__ import annotations

import re

import pytest

from tests.helpers import read_metrics, run_train_grpo
from tests.ray_cluster import Cluster, local_cluster

pytestmark = pytest.mark.slow

NODES = {"head": (8, 1), "worker": (8, 1)}  # name -> (logical CPUs, logical GPUs)
# the smoke config's step (4 prompts x 2 responses) split over two ranks: 4 samples each
TWO_RANKS = [
    "trainer.nnodes=2",
    "trainer.n_gpus_per_node=1",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4",
]
SAVED = re.compile(r"\[Rank (\d)\] Saved model to .*model_world_size_2_rank_\d\.pt")


def train(cluster: Cluster, workdir, steps: int):
    env = {**cluster.env, "RG_VERL_TINY_MODEL": str(workdir / "model"),
           "VERL_FILE_LOGGER_PATH": str(workdir / f"metrics_{steps}.jsonl")}  # fmt: skip
    overrides = [f"trainer.default_local_dir={workdir / 'ckpt'}", "trainer.logger=[console,file]",
                 f"trainer.total_training_steps={steps}", "trainer.save_freq=2", "trainer.test_freq=-1"]  # fmt: skip
    run_train_grpo(workdir, *TWO_RANKS, *overrides, env=env)
    return read_metrics(workdir / f"metrics_{steps}.jsonl")


def ranks_per_node(cluster: Cluster) -> dict[str, set[int]]:
    """The FSDP ranks whose checkpoint save each node's own worker logs record."""
    ranks = {}
    for name in NODES:
        logs = (cluster.root / name).glob("session_*/logs/worker-*")
        ranks[name] = {int(m) for log in logs for m in SAVED.findall(log.read_text(errors="replace"))}
    return ranks


def test_training_runs_across_two_nodes_and_resumes(tmp_path):
    with local_cluster(NODES) as cluster:
        first = train(cluster, tmp_path, steps=2)
        assert sorted(first) == [1, 2]
        actor = tmp_path / "ckpt" / "global_step_2" / "actor"
        assert {p.name for p in actor.glob("model_world_size_2_rank_*.pt")} == {
            "model_world_size_2_rank_0.pt", "model_world_size_2_rank_1.pt"
        }  # fmt: skip
        per_node = ranks_per_node(cluster)
        assert per_node["head"] | per_node["worker"] == {0, 1} and len(per_node["head"]) == 1, per_node

        resumed = train(cluster, tmp_path, steps=3)
        assert sorted(resumed) == [3]  # continued from the checkpoint of step 2
        assert "train/reasoning_gym/chain_sum/score" in resumed[3]
    assert cluster.processes() == []


def test_the_cluster_is_stopped_when_the_test_fails():
    with pytest.raises(RuntimeError, match="the test failed"), local_cluster({"head": (2, 1)}) as cluster:
        assert cluster.processes()
        raise RuntimeError("the test failed")
    assert cluster.processes() == []
    assert not cluster.root.exists()
