"""Tests of rg_verl.oreo.collect on the tiny model: the rows, determinism, resuming, refusals."""

from __future__ import annotations

import json

import pytest

from rg_verl.common.tokenizer import tokenizer_fingerprint
from rg_verl.evaluation.backends import create_backend
from rg_verl.evaluation.backends.hf import prompt_token_ids
from rg_verl.oreo import collect as collect_module
from rg_verl.oreo.collect import main
from rg_verl.oreo.trajectories import MANIFEST, load_trajectories, shard_name
from tests.helpers import CONFIGS_DIR
from tests.unit.oreo.collecting import MAX_TOKENS, TRAIN, VAL, K, argv, read_rows, shard_bytes


@pytest.fixture(scope="module")
def collected(tiny_model, tmp_path_factory):
    out = tmp_path_factory.mktemp("collect") / "out"
    assert main(argv(tiny_model, out)) == 0
    return out


def composed(*overrides: str):
    from rg_verl.common.compose import compose

    return compose(str(CONFIGS_DIR / "smoke"), "cpu", list(overrides))


def test_rows_are_the_training_items_scored_by_the_training_reward(collected, tiny_model):
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer

    from rg_verl.data.dataset import ReasoningGymDataset
    from rg_verl.reward import compute_score

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    config = composed(f"actor_rollout_ref.model.path={tiny_model}")
    reward_kwargs = OmegaConf.to_container(config.reward.custom_reward_function.reward_kwargs, resolve=True)
    assert reward_kwargs["terms"]["length"] == 0.05 and reward_kwargs["tokenizer_path"] == str(tiny_model)
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    for split, indices in (("train", range(1, 1 + TRAIN)), ("val", range(VAL))):
        dataset = ReasoningGymDataset(f"reasoning_gym://{split}", None, {"reasoning_gym": config.reasoning_gym})
        rows = read_rows(collected / split)
        assert [(r["uid"], r["sample_idx"]) for r in rows] == [(f"{split}/{i}", j) for i in indices for j in range(K)]
        for r in rows:
            item = dataset[r["index"]]
            assert json.loads(r["prompt"]) == item["raw_prompt"] and r["data_source"] == item["data_source"]
            assert r["prompt_ids"] == prompt_token_ids(tokenizer, item["raw_prompt"])
            assert tokenizer.decode(r["prompt_ids"]).endswith("<|im_start|>assistant\n")
            assert tokenizer.decode(r["response_ids"], skip_special_tokens=True) == r["response"]
            assert r["ids_source"] == "backend" and 1 <= len(r["response_ids"]) <= MAX_TOKENS
            assert r["finished"] == (r["response_ids"][-1] == eos)
            assert eos not in r["response_ids"][:-1]  # no padding, nothing after the end
            expected = compute_score(
                data_source=item["data_source"], solution_str=r["response"], extra_info=item["extra_info"],
                ground_truth=item["reward_model"]["ground_truth"], **reward_kwargs,
            )  # fmt: skip
            expected.pop("pred")  # the one text value: validation's vote, not a trajectory column
            assert {key: r[key] for key in expected} == expected
            assert set(r) - set(expected) == {
                "uid", "split", "index", "sample_idx", "data_source", "prompt", "prompt_ids", "response",
                "response_ids", "ids_source", "finished",
            }  # fmt: skip
        # the samples of one item differ: they are sampled, not copies
        assert len({tuple(r["response_ids"]) for r in rows if r["index"] == indices[0]}) > 1


def test_manifest_records_what_made_the_files(collected, tiny_model):
    from transformers import AutoTokenizer

    manifest = json.loads((collected / MANIFEST).read_text())
    assert manifest["model_path"] == str(tiny_model) and manifest["backend"] == "hf"
    assert manifest["sampling"] == {"max_tokens": MAX_TOKENS, "temperature": 1.0, "top_p": 1.0}
    assert (manifest["samples_per_item"], manifest["seed"], manifest["shard_size"]) == (K, 7, 2)
    assert manifest["items"] == {"train": [1, 1 + TRAIN], "val": [0, VAL]}
    assert manifest["rows"] == {"train": TRAIN * K, "val": VAL * K} and manifest["complete"] is True
    assert manifest["config"]["name"] == "cpu" and manifest["config"]["path"] == str(CONFIGS_DIR / "smoke")
    assert manifest["config"]["reasoning_gym"]["datasets"].keys() == {"chain_sum", "leg_counting"}
    assert manifest["config"]["reward_kwargs"]["terms"]["format"] == 0.1
    assert manifest["tokenizer_fingerprint"] == tokenizer_fingerprint(AutoTokenizer.from_pretrained(tiny_model))
    assert {"rg-verl", "verl", "reasoning-gym", "transformers"} <= {k for k, v in manifest["versions"].items() if v}
    assert "vllm" not in manifest["versions"] and manifest["created"]
    shards = ["train/" + shard_name(0), "train/" + shard_name(1), "val/" + shard_name(0)]
    assert sorted(shard_bytes(collected)) == shards


def test_the_loader_reads_a_collection_with_the_policys_tokenizer(collected, tiny_model):
    from transformers import AutoTokenizer

    rows = load_trajectories(collected / "train", tokenizer=AutoTokenizer.from_pretrained(tiny_model))
    assert len(rows) == TRAIN * K and {t.split for t in rows} == {"train"}


def test_two_runs_write_identical_files(collected, tiny_model, tmp_path):
    assert main(argv(tiny_model, tmp_path / "again")) == 0
    assert shard_bytes(tmp_path / "again") == shard_bytes(collected)


class FailingBackend:
    """The real hf backend that fails on its ``fail_at``-th generate call (an interrupted run)."""

    calls = 0

    def __init__(self, settings, fail_at=None):
        self.inner, self.fail_at = create_backend(settings), fail_at
        self.prompt_ids = self.inner.prompt_ids

    def generate(self, prompts, n, sampling):
        FailingBackend.calls += 1
        if FailingBackend.calls == self.fail_at:
            raise KeyboardInterrupt
        return self.inner.generate(prompts, n, sampling)

    def close(self):
        self.inner.close()


def test_resuming_an_interrupted_run_gives_the_same_files(collected, tiny_model, tmp_path, monkeypatch):
    out = tmp_path / "out"
    FailingBackend.calls = 0
    monkeypatch.setattr(collect_module, "create_backend", lambda settings: FailingBackend(settings, fail_at=4))
    with pytest.raises(KeyboardInterrupt):  # during the second shard: only the first is written
        main(argv(tiny_model, out))
    assert sorted(shard_bytes(out)) == ["train/" + shard_name(0)]
    assert json.loads((out / MANIFEST).read_text())["complete"] is False
    FailingBackend.calls = 0
    monkeypatch.setattr(collect_module, "create_backend", lambda settings: FailingBackend(settings))
    assert main(argv(tiny_model, out, "--resume")) == 0
    assert FailingBackend.calls == TRAIN + VAL - 2  # one call per item; the first shard's two were kept
    assert shard_bytes(out) == shard_bytes(collected)
    FailingBackend.calls = 0
    assert main(argv(tiny_model, out, "--resume")) == 0 and FailingBackend.calls == 0  # nothing left to do


def test_resume_refuses_changed_settings_naming_the_field(collected, tiny_model, capsys):
    before = shard_bytes(collected)
    for extra, field in (
        (["--temperature", "0.5"], "sampling.temperature: 0.5 differs from 1.0"),
        (["--samples", "2"], "samples_per_item: 2 differs from 3"),
        (["--train-items", "2"], "items.train: [1, 3] differs from [1, 5]"),
        (["reasoning_gym.seed=5"], "config.reasoning_gym"),
        (["reward.custom_reward_function.reward_kwargs.mode=strict"], "config.reward_kwargs"),
    ):
        assert main(argv(tiny_model, collected, "--resume", *extra)) == 1
        err = capsys.readouterr().err
        assert field in err and "in the collection being resumed" in err and "set it back" in err, err
    assert main(argv(tiny_model, collected)) == 1
    assert "holds a collection; pass --resume to continue it, or --overwrite" in capsys.readouterr().err
    assert shard_bytes(collected) == before


def test_overwrite_replaces_a_collection_and_bad_requests_fail_before_loading(tiny_model, tmp_path, capsys):
    out = tmp_path / "out"
    (out / "val").mkdir(parents=True)
    (out / "note.txt").write_text("mine")
    assert main(argv(tiny_model, out)) == 1
    assert "exists and is not empty; choose a new folder, or pass --overwrite" in capsys.readouterr().err
    quick = ["--samples", "1", "--train-items", "1", "--val-items", "0"]
    assert main(argv(tiny_model, out, "--overwrite", *quick)) == 0
    assert sorted(shard_bytes(out)) == ["train/" + shard_name(0)] and not (out / "val").exists()
    for extra, message in (
        (["--train-items", "100"], "items: train items [1, 101) do not lie in the train split's 64 items"),
        (["--train-items", "0", "--val-items", "0"], "both are 0; ask for the items of at least one split"),
        (["--samples", "0"], "--samples: 0 is below 1"),
        (["--temperature", "3"], "need in [0, 2]"),  # vLLM refuses more than 2
        (["--model-path", str(tmp_path / "missing")], "is neither a local model directory nor a hub id"),
    ):
        assert main(argv(tiny_model, tmp_path / "new", *extra)) == 1
        assert message in capsys.readouterr().err
    assert not (tmp_path / "new").exists()
