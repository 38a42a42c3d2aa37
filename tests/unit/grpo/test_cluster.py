"""A run that joins a Ray cluster started elsewhere: when it does, and what its processes are given."""

from __future__ import annotations

import doctest

import pytest
from omegaconf import OmegaConf

from rg_verl.grpo import cluster
from rg_verl.grpo.cluster import forwarded_env, joins_a_cluster


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
