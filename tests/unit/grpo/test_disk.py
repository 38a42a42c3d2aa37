"""rg_verl.grpo.disk: the run's folder is checked before Ray starts (CI runs as root, which ignores permission
bits: an unwritable folder is made here with a path through a file)."""

import shutil
from collections import namedtuple

import pytest
from hydra import compose, initialize_config_dir

import rg_verl
from rg_verl.common.schema import ConfigError
from rg_verl.cpu.tiny_model import build_tiny_model
from rg_verl.grpo import disk
from tests.helpers import REPO

Usage = namedtuple("Usage", "total used free")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("disk") / "tiny")


def smoke(*overrides):
    with initialize_config_dir(config_dir=str(REPO / "configs" / "smoke"), version_base=None):
        return compose(config_name="cpu", overrides=list(overrides))


def test_the_nearest_existing_folder_is_what_creating_the_path_writes_into(tmp_path):
    assert disk.nearest_folder(tmp_path / "a" / "b") == tmp_path
    assert disk.nearest_folder(tmp_path) == tmp_path


def test_a_folder_that_cannot_be_created_is_named_before_anything_runs(tmp_path):
    (tmp_path / "a_file").write_text("")
    target = tmp_path / "a_file" / "run"
    message = rf"trainer.default_local_dir: {target} cannot be created: .*a_file is a file"
    with pytest.raises(ConfigError, match=message):
        disk.check_output_dir(smoke(f"trainer.default_local_dir={target}"))
    # the same through the command's own path, before Ray (a dry run stops right after the checks)
    with pytest.raises(ConfigError, match="cannot be created"):
        rg_verl.train(overrides=[f"trainer.default_local_dir={target}", "+dry_run=true"])
    assert not target.exists()


def test_parameters_are_counted_from_the_safetensors_headers(model):
    import torch
    from transformers import AutoModelForCausalLM

    loaded = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    tied = loaded.config.tie_word_embeddings  # the tied head is stored once
    expected = sum(p.numel() for name, p in loaded.named_parameters(remove_duplicate=tied))
    assert disk.count_parameters(str(model)) == expected
    assert disk.count_parameters("nobody/no-such-model") is None  # not in the local cache: unknown


def test_a_checkpoint_holds_fp32_weights_and_adams_moments(model):
    config = smoke(f"actor_rollout_ref.model.path={model}")
    assert disk.checkpoint_bytes(config, 1000) == 1000 * 12
    with_hf = smoke("actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]")
    assert disk.checkpoint_bytes(with_hf, 1000) == 1000 * 14
    lora = smoke("actor_rollout_ref.model.lora_rank=8")  # the optimizer holds the adapter's moments only
    assert disk.checkpoint_bytes(lora, 1000) == 1000 * 4
    assert disk.checkpoint_bytes(smoke("algorithm.adv_estimator=gae"), 1000) == 2 * 1000 * 12  # a critic too


def test_a_disk_without_room_for_one_checkpoint_is_named_with_the_space_needed(model, tmp_path, monkeypatch):
    parameters = disk.count_parameters(str(model))
    config = smoke(f"actor_rollout_ref.model.path={model}", f"trainer.default_local_dir={tmp_path / 'run'}",
                   "trainer.save_freq=1")  # fmt: skip
    monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(0, 0, parameters * 12 - 1))
    with pytest.raises(ConfigError, match=r"has 0\.0 GB free, and one checkpoint of this run needs about 0\.0 GB"):
        disk.check_output_dir(config)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(0, 0, parameters * 12))
    disk.check_output_dir(config)  # exactly enough
    # a run that saves nothing needs no room
    monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(0, 0, 0))
    disk.check_output_dir(smoke(f"actor_rollout_ref.model.path={model}", "trainer.save_freq=-1"))
