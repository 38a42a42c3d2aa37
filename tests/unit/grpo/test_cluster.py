"""A run that joins a Ray cluster started elsewhere: when it does, and what its processes are given."""

from __future__ import annotations

import doctest
import re

import pytest
from omegaconf import OmegaConf

from rg_verl.grpo import cluster
from rg_verl.grpo.cluster import forwarded_env, joins_a_cluster, shared_socket_warning


def test_doctests():
    assert doctest.testmod(cluster).failed == 0


@pytest.mark.parametrize(
    ("address", "env", "joins"),
    [(None, None, False), (None, "10.0.0.1:6379", True), ("auto", None, True), (None, "local", False)],
)
def test_a_run_joins_the_cluster_that_the_config_or_ray_address_names(monkeypatch, address, env, joins):
    if env is None:
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
    else:
        monkeypatch.setenv("RAY_ADDRESS", env)
    config = OmegaConf.create({"ray_kwargs": {"ray_init": {"address": address} if address else {}}})
    assert joins_a_cluster(config) is joins


def test_trackers_caches_and_our_settings_are_forwarded_and_secrets_never():
    environ = {
        "VERL_FILE_LOGGER_PATH": "/shared/metrics.jsonl", "TENSORBOARD_DIR": "/shared/tb", "WANDB_PROJECT": "p",
        "HF_HOME": "/shared/hf", "RG_VERL_SEARCH_CACHE": "/shared/searches", "WANDB_API_KEY": "k",
        "HF_TOKEN": "t", "MY_PASSWORD": "x", "PATH": "/bin", "TENSORBOARD_DIRS": "no",
    }  # fmt: skip
    assert forwarded_env(environ) == {
        "VERL_FILE_LOGGER_PATH": "/shared/metrics.jsonl", "TENSORBOARD_DIR": "/shared/tb", "WANDB_PROJECT": "p",
        "HF_HOME": "/shared/hf", "RG_VERL_SEARCH_CACHE": "/shared/searches",
    }  # fmt: skip


def _config(rollout: str, address: str | None = None):
    ray_init = {"address": address} if address else {}
    return OmegaConf.create({"actor_rollout_ref": {"rollout": {"name": rollout}}, "ray_kwargs": {"ray_init": ray_init}})


@pytest.fixture
def other_raylet(tmp_path, monkeypatch):
    """A process named raylet, as another Ray cluster on this machine runs one; this process has no Ray."""
    import shutil
    import subprocess

    import ray

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    shutil.copy(shutil.which("sleep"), tmp_path / "raylet")
    process = subprocess.Popen([str(tmp_path / "raylet"), "60"])
    yield process
    process.kill()
    process.wait()


def test_a_vllm_run_that_starts_its_own_cluster_beside_another_is_warned_of_the_shared_socket(other_raylet):
    warning = shared_socket_warning(_config("vllm"))
    assert warning is not None and other_raylet.pid in _named_pids(warning)
    assert "rl-colocate-zmq-01000000" in warning and "RAY_ADDRESS=auto" in warning and "docs/multinode.md" in warning


def test_no_shared_socket_warning_for_the_hf_rollout_or_a_run_that_joins_a_cluster(other_raylet):
    assert shared_socket_warning(_config("hf")) is None
    assert shared_socket_warning(_config("vllm", address="auto")) is None


def test_the_warning_names_only_running_raylets(other_raylet):
    other_raylet.kill()
    other_raylet.wait()
    warning = shared_socket_warning(_config("vllm"))  # other tests' Ray runs may be running beside this one
    assert warning is None or other_raylet.pid not in _named_pids(warning)


def _named_pids(warning: str) -> list[int]:
    return [int(pid) for pid in re.search(r"raylet pid ([\d, ]+)\)", warning).group(1).split(", ")]
