"""train_grpo.py end to end on the CPU smoke config, one run shared by every check of it (each Ray run costs the
suite a minute or more): two steps across a real two-node Ray cluster (docs/multinode.md) on the quiet console with
every logger, a resume for a third step, and the run's two-rank checkpoint converted to the model verl restores.

The cluster is a head and a worker node started with ``ray start`` on this machine, one logical GPU each, and the
smoke config runs with ``trainer.nnodes=2``. No node has two GPUs, so verl's two FSDP ranks can only be placed one
per node; each node's own logs show which rank it ran. The cluster is stopped at the end, also when the run fails
(tests/ray_cluster.py). The converter's fast tests are in tests/unit/checkpoint.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from safetensors.torch import load_file

from rg_verl.checkpoint import convert_checkpoint, inspect_checkpoint
from rg_verl.checkpoint.synthetic import (
    cpu_mesh,
    full_state,
    gloo_group,
    load_checkpoint,
    quiet_worker,
    shard_like_verl,
)
from tests.checkpoint_helpers import PROMPT, load_hf, logits_of, output_tensors
from tests.helpers import read_metrics, run_train_grpo
from tests.ray_cluster import local_cluster

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
WORLD = 2


def train(
    workdir: Path,
    model_dir: Path,
    metrics: Path,
    *overrides: str,
    loggers: str = "[console,file]",
    env: dict | None = None,
) -> subprocess.CompletedProcess:
    """train_grpo.py on the smoke config in ``workdir``, logging verl's metrics to ``metrics`` (and to W&B, offline,
    and TensorBoard under ``workdir`` where ``loggers`` names them); ``env`` adds to the environment."""
    env = {"RG_VERL_TINY_MODEL": str(model_dir), "VERL_FILE_LOGGER_PATH": str(metrics), "WANDB_MODE": "offline",
           "WANDB_DIR": str(workdir), "WANDB_SILENT": "true",
           "TENSORBOARD_DIR": str(workdir / "tensorboard"), **(env or {})}  # fmt: skip
    logging = [f"trainer.default_local_dir={workdir / 'ckpt'}", f"trainer.logger={loggers}"]
    return run_train_grpo(workdir, *logging, *overrides, env=env)


@dataclass
class SmokeRun:
    workdir: Path
    console: str  # what the first run printed
    first: dict[int, dict]  # its metrics, step -> dict
    resumed: dict[int, dict]  # the resumed run's
    ranks: dict[str, set[int]]  # node -> the FSDP ranks whose checkpoint save its own logs record
    left: list  # the cluster's processes after it stopped


def ranks_per_node(root: Path) -> dict[str, set[int]]:
    """The FSDP ranks whose checkpoint save each node's own worker logs (under the cluster's ``root``) record."""
    ranks = {}
    for name in NODES:
        logs = (root / name).glob("session_*/logs/worker-*")
        ranks[name] = {int(m) for log in logs for m in SAVED.findall(log.read_text(errors="replace"))}
    return ranks


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory) -> SmokeRun:
    """Two steps on the quiet console (validation and a checkpoint at step 2), then a resume for a third."""
    workdir = tmp_path_factory.mktemp("smoke")
    model = workdir / "model"
    with local_cluster(NODES) as cluster:
        proc = train(
            workdir, model, workdir / "metrics_first.jsonl", *TWO_RANKS, "trainer.total_training_steps=2",
            "trainer.save_freq=2", "trainer.test_freq=2", "trainer.console=progress",
            loggers="[console,file,wandb,tensorboard]", env=cluster.env,
        )  # fmt: skip
        ranks = ranks_per_node(cluster.root)
        train(
            workdir, model, workdir / "metrics_resumed.jsonl", *TWO_RANKS, "trainer.total_training_steps=3",
            "trainer.save_freq=3", "trainer.test_freq=3", "trainer.resume_mode=auto", env=cluster.env,
        )  # fmt: skip
    first, resumed = read_metrics(workdir / "metrics_first.jsonl"), read_metrics(workdir / "metrics_resumed.jsonl")
    return SmokeRun(workdir, proc.stdout + proc.stderr, first, resumed, ranks, cluster.processes())


def test_the_quiet_console_shows_a_line_a_step_and_the_log_holds_verls_output(smoke_run):
    [log] = (smoke_run.workdir / "ckpt" / "logs").glob("train-*.log")
    console = smoke_run.console
    assert f"[rg-verl] verl's and Ray's logs: {log}" in console
    for step in (1, 2):
        reward = smoke_run.first[step]["critic/score/mean"]
        assert re.search(rf"^\[rg-verl\] step {step}/2  reward {reward:.3f}  accuracy \d\.\d{{3}}  [\d.]+ s/step  "
                         r"\d+:\d\d:\d\d left$", console, re.MULTILINE), console  # fmt: skip
    assert f"[rg-verl] the run finished; the full log: {log}" in console
    assert "step:1 - " not in console and "TaskRunnerV1" not in console  # verl's and Ray's output went to the log
    full = log.read_text()
    assert "step:1 - " in full and "step:2 - " in full and "[rg-verl] step 2/2" in full


def test_smoke_run_takes_grpo_steps_scored_by_our_reward(smoke_run):
    metrics = smoke_run.first
    assert sorted(metrics) == [1, 2]
    for step in (1, 2):
        assert metrics[step]["training/global_step"] == step
        assert "critic/advantages/mean" in metrics[step]
    # the rollout served the weights the actor had: its log-probs match the actor's
    assert metrics[2]["training/rollout_probs_diff_max"] < 1e-3
    # training and validation rewards came from rg_verl.reward: only it returns these keys
    for dataset in ("chain_sum", "leg_counting"):
        for step in (1, 2):
            prefix = f"train/reasoning_gym/{dataset}/"
            train = {key[len(prefix) :]: value for key, value in metrics[step].items() if key.startswith(prefix)}
            # the smoke config's reward: lenient correctness + 0.1 format + 0.05 length
            expected = train["correct_lenient"] + 0.1 * train["term/format"] + 0.05 * train["term/length"]
            assert train["score"] == pytest.approx(expected)
            assert train["term/length"] < 0  # real token counts reached the length term
        for key in ("accuracy", "correct_strict", "correct_lenient", "format_ok", "term/format", "term/length"):
            assert f"val-aux/reasoning_gym/{dataset}/{key}/mean@1" in metrics[2], key


def test_smoke_run_logs_to_wandb_and_tensorboard_files_their_readers_load(smoke_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from tests.helpers import wandb_history

    logged, workdir = smoke_run.first, smoke_run.workdir
    ours = ["train/reasoning_gym/chain_sum/score", "train/reasoning_gym/leg_counting/groups/all_wrong",
            "train/reasoning_gym/category/arithmetic/score"]  # fmt: skip
    [run_log] = (workdir / "wandb").glob("offline-run-*/run-*.wandb")
    history = wandb_history(run_log)
    events = EventAccumulator(str(workdir / "tensorboard")).Reload()
    for key in ours:
        for step in (1, 2):
            assert history[step][key] == pytest.approx(logged[step][key]), (key, step)
        assert [(e.step, e.value) for e in events.Scalars(key)] == [
            (step, pytest.approx(logged[step][key])) for step in (1, 2)
        ], key
    assert "val-core/reasoning_gym/chain_sum/reward/mean@1" in history[2]


def test_the_ranks_ran_one_on_each_node_and_saved_a_checkpoint_each(smoke_run):
    actor = smoke_run.workdir / "ckpt" / "global_step_2" / "actor"
    assert {p.name for p in actor.glob("model_world_size_2_rank_*.pt")} == {
        "model_world_size_2_rank_0.pt", "model_world_size_2_rank_1.pt"
    }  # fmt: skip
    assert (actor / "huggingface" / "config.json").is_file()
    ranks = smoke_run.ranks
    assert ranks["head"] | ranks["worker"] == {0, 1} and len(ranks["head"]) == 1, ranks
    assert smoke_run.left == []  # the cluster stopped


def test_resume_continues_from_checkpoint(smoke_run):
    metrics, ckpt = smoke_run.resumed, smoke_run.workdir / "ckpt"
    assert sorted(metrics) == [3], f"resumed run logged steps {sorted(metrics)}, expected 3 only"
    assert "train/reasoning_gym/chain_sum/score" in metrics[3]
    assert (ckpt / "global_step_3" / "actor" / "huggingface").is_dir()
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "3"


def _reload_worker(rank: int, world: int, actor_dir: str, out: str) -> None:
    """The trained actor as verl restores it: FSDP2 model + FSDPCheckpointManager.load_checkpoint."""
    from transformers import AutoConfig, AutoModelForCausalLM

    quiet_worker()
    with gloo_group(f"{out}.init", rank, world):
        torch.manual_seed(123)  # any weights: the checkpoint overwrites them
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(Path(actor_dir) / "huggingface"))
        load_checkpoint(shard_like_verl(model, cpu_mesh(world)), actor_dir)
        with torch.no_grad():
            logits = model(input_ids=PROMPT).logits
        state = full_state(model)
        if rank == 0:
            torch.save({"logits": logits, "state": state}, out)
        dist.barrier()


def test_the_two_rank_checkpoint_converts_to_the_model_verl_restores(smoke_run, tmp_path):
    import torch.multiprocessing as mp

    src = smoke_run.workdir / "ckpt" / "global_step_2" / "actor"
    assert inspect_checkpoint(src).world_size == WORLD

    mp.spawn(_reload_worker, args=(WORLD, str(src), str(tmp_path / "reloaded.pt")), nprocs=WORLD, join=True)
    ref = torch.load(tmp_path / "reloaded.pt", weights_only=True)
    result = convert_checkpoint(src, tmp_path / "hf", verify=True, progress=False)
    assert result.world_size == WORLD and result.dtype == "float32"
    tensors = output_tensors(tmp_path / "hf")
    for key, value in ref["state"].items():
        assert torch.equal(tensors[key if key != "lm_head.weight" else "model.embed_tokens.weight"], value), key
    torch.testing.assert_close(logits_of(load_hf(tmp_path / "hf")), ref["logits"], rtol=1e-5, atol=1e-5)
    init = load_file(smoke_run.workdir / "model" / "model.safetensors")
    assert any(not torch.equal(init[k], tensors[k]) for k in init)  # training moved the weights


def test_the_cluster_is_stopped_when_the_test_fails():
    with pytest.raises(RuntimeError, match="the test failed"), local_cluster({"head": (2, 1)}) as cluster:
        assert cluster.processes()
        raise RuntimeError("the test failed")
    assert cluster.processes() == []
    assert not cluster.root.exists()
