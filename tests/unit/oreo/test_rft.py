"""Tests of rg_verl.oreo.rft: which trajectories become SFT data, the composed verl SFT config, refusals."""

from __future__ import annotations

import json

import pytest

from rg_verl.common.schema import ConfigError
from rg_verl.oreo.rft import CPU_SETTINGS, main, rft_rows, sft_config
from rg_verl.oreo.trajectories import Trajectory
from tests.oreo_helpers import write_synthetic_trajectories


def trajectory(uid: str, sample: int, reward: float, response: str) -> Trajectory:
    prompt = json.dumps([{"role": "user", "content": f"question {uid}"}])
    return Trajectory(uid=uid, split="train", index=0, sample_idx=sample, data_source="reasoning_gym/chain_sum",
                      prompt_ids=(1,), response_ids=(2,), reward=reward, accuracy=reward, finished=True,
                      prompt=prompt, response=response)  # fmt: skip


ROWS = [
    trajectory("train/1", 2, 1.0, "b"), trajectory("train/1", 0, 1.0, "a"), trajectory("train/1", 1, 1.0, "a"),
    trajectory("train/1", 3, 0.0, "wrong"), trajectory("train/0", 0, 0.5, "half"), trajectory("train/0", 1, 1.0, "c"),
]  # fmt: skip


def test_the_correct_distinct_responses_become_conversations_per_item_lowest_sample_first():
    rows = rft_rows(ROWS)
    assert [(r["uid"], r["sample_idx"]) for r in rows] == [("train/0", 1), ("train/1", 0), ("train/1", 2)]
    assert rows[0]["messages"] == [{"role": "user", "content": "question train/0"}, {"role": "assistant",
                                                                                     "content": "c"}]  # fmt: skip
    assert [(r["uid"], r["sample_idx"]) for r in rft_rows(ROWS, per_item=1)] == [("train/0", 1), ("train/1", 0)]
    assert len(rft_rows(ROWS, min_reward=0.5)) == 4  # "half" joins
    with pytest.raises(ConfigError, match="--per-item: 0 is below 1"):
        rft_rows(ROWS, per_item=0)


def test_the_sft_config_is_verls_with_this_runs_fields_and_the_cpu_settings(tmp_path):
    config = sft_config("m", tmp_path / "d.parquet", tmp_path, ["optim.lr=1e-5", "data.train_batch_size=8"], "cpu")
    assert config.model.path == "m" and config.data.train_files == str(tmp_path / "d.parquet")
    assert config.trainer.default_local_dir == str(tmp_path) and config.data.val_files is None
    assert config.optim.lr == 1e-5 and config.data.train_batch_size == 8
    assert config.engine.strategy == "fsdp2" and config.model.override_config.attn_implementation == "sdpa"
    assert config.engine.mixed_precision.param_dtype == "fp32" and set(CPU_SETTINGS) >= {"trainer.device"}
    assert sft_config("m", tmp_path / "d.parquet", tmp_path, [], "cuda").engine.get("mixed_precision") is None


def test_bad_requests_fail_before_training_naming_the_fix(tmp_path, tiny_model, capsys):
    trajectories = write_synthetic_trajectories(tiny_model, tmp_path / "traj", n_train=8, n_val=2)
    base = ["--trajectories", str(trajectories / "train"), "--model-path", str(tiny_model), "--device", "cpu"]
    assert main([*base, "--out", str(tmp_path / "a"), "--min-reward", "2"]) == 1
    assert "none of the 8 trajectories has accuracy >= 2.0" in capsys.readouterr().err
    assert main([*base, "--out", str(tmp_path / "b"), "data.train_batch_size=64"]) == 1
    assert "data.train_batch_size: 64, but only" in capsys.readouterr().err
    uneven = ["--min-reward", "0", "data.train_batch_size=3", "data.micro_batch_size_per_gpu=2"]
    assert main([*base, "--out", str(tmp_path / "c"), *uneven]) == 1
    assert "does not split into 1 ranks x data.micro_batch_size_per_gpu=2" in capsys.readouterr().err
    assert main([*base, "--out", str(tmp_path / "d"), "--reward-key", "nope"]) == 1
    assert "reward_key: 'nope' is not a reward column" in capsys.readouterr().err
    assert not any((tmp_path / name).exists() for name in "abcd")  # refused before anything was written
