"""Tests for rg_verl.data.dataset.ReasoningGymDataset."""

import collections
import json

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from omegaconf import ListConfig, OmegaConf
from reasoning_gym.factory import DATASETS

from rg_verl.data.dataset import (
    SPLITS,
    ReasoningGymDataset,
    dataset_seed,
    to_json_safe,
)
from rg_verl.reward import compute_score
from rg_verl.vocab import MAX_SPLIT_SIZE, SPLIT_STRIDE

BIG_SPACE_MIX = {
    "chain_sum": {"weight": 1.0, "config": {"min_terms": 3, "max_terms": 5, "min_digits": 3}},
    "word_sorting": {"weight": 1.0},
    "letter_counting": {"weight": 1.0},
}


def make(datasets, split="train", max_samples=-1, omegaconf=True, **section):
    section = {"datasets": datasets, "seed": 42, "train_size": 100, "val_size": 20, "eval_size": 20, **section}
    config = {"reasoning_gym": section, "max_prompt_length": 512}
    if omegaconf:
        config = OmegaConf.create(config)
    return ReasoningGymDataset(f"reasoning_gym://{split}", None, config, processor=None, max_samples=max_samples)


def questions(ds):
    return [ds[i]["raw_prompt"][-1]["content"] for i in range(len(ds))]


# --- item format ---------------------------------------------------------------------------------


def test_item_format():
    ds = make({"chain_sum": {"config": {"min_terms": 2, "max_terms": 3}}}, system_prompt="default")
    item = ds[3]
    assert set(item) == {
        "raw_prompt",
        "data_source",
        "reward_model",
        "extra_info",
        "index",
        "tools_kwargs",
        "interaction_kwargs",
        "dummy_tensor",
    }
    entry = item["extra_info"]["entry"]
    system, user = item["raw_prompt"]
    assert system["role"] == "system" and "<answer>" in system["content"]
    assert user == {"role": "user", "content": entry["question"]}
    assert item["data_source"] == "reasoning_gym/chain_sum"
    assert item["reward_model"] == {"style": "rule", "ground_truth": entry["answer"]}
    assert item["extra_info"] == {
        "split": "train",
        "index": 3,
        "dataset": "chain_sum",
        "category": "arithmetic",
        "entry": entry,
    }
    assert item["index"] == 3 and item["tools_kwargs"] == {} and item["interaction_kwargs"] == {}
    assert torch.equal(item["dummy_tensor"], torch.tensor([0], dtype=torch.uint8))
    assert json.loads(json.dumps(item["extra_info"])) == item["extra_info"]


def test_system_prompt_literal_and_none():
    assert make({"chain_sum": {}}, system_prompt="Be brief.")[0]["raw_prompt"][0] == {
        "role": "system",
        "content": "Be brief.",
    }
    assert [m["role"] for m in make({"chain_sum": {}}, system_prompt=None)[0]["raw_prompt"]] == ["user"]


def test_items_collate_with_verl():
    from verl import DataProto
    from verl.utils.dataset.rl_dataset import collate_fn

    ds = make({"chain_sum": {}, "leg_counting": {}, "knights_knaves": {}})
    batch = collate_fn([ds[i] for i in range(8)])
    assert batch["dummy_tensor"].shape == (8, 1)
    for key in ["raw_prompt", "data_source", "reward_model", "extra_info", "index"]:
        assert isinstance(batch[key], np.ndarray) and batch[key].dtype == object and batch[key].shape == (8,)
    proto = DataProto.from_single_dict(batch)
    assert len(proto) == 8


def test_built_by_verl_through_custom_cls():
    """The way verl's trainer builds it: data.custom_cls plus an interpolated data.reasoning_gym."""
    from verl.trainer.ppo.utils import create_rl_dataset

    root = OmegaConf.create(
        {
            "reasoning_gym": {"datasets": {"chain_sum": {"weight": 1.0}}, "seed": 3, "train_size": 12, "val_size": 4},
            "data": {
                "custom_cls": {"path": "pkg://rg_verl.data.dataset", "name": "ReasoningGymDataset"},
                "train_files": "reasoning_gym://train",
                "val_files": "reasoning_gym://val",
                "reasoning_gym": "${reasoning_gym}",
            },
        }
    )
    train = create_rl_dataset(root.data.train_files, root.data, None, None, is_train=True, max_samples=-1)
    val = create_rl_dataset(root.data.val_files, root.data, None, None, is_train=False, max_samples=-1)
    assert type(train).__name__ == "ReasoningGymDataset"
    assert (len(train), len(val)) == (12, 4)
    assert val[0]["extra_info"]["split"] == "val"


def test_verl_dataloader_builds_batches():
    from torch.utils.data import DataLoader
    from verl.utils.dataset.rl_dataset import collate_fn

    loader = DataLoader(make({"chain_sum": {}}), batch_size=16, collate_fn=collate_fn, shuffle=True)
    batches = list(loader)
    assert sum(len(b["index"]) for b in batches) == 100


@pytest.mark.parametrize("name", ["chain_sum", "leg_counting", "spell_backward", "basic_arithmetic", "knights_knaves"])
def test_own_answer_scores_one(name):
    ds = make({name: {}}, train_size=8)
    for i in range(len(ds)):
        item = ds[i]
        response = f"<think>...</think><answer>{item['reward_model']['ground_truth']}</answer>"
        result = compute_score(item["data_source"], response, item["reward_model"]["ground_truth"], item["extra_info"])
        assert result["score"] == 1.0, (name, i)


# --- determinism and seed spaces -----------------------------------------------------------------


def test_deterministic_across_instances():
    a = make(BIG_SPACE_MIX, omegaconf=True)
    b = make(BIG_SPACE_MIX, omegaconf=False)
    for i in [0, 1, 17, 99, 5, 0]:
        x, y = a[i], b[i]
        assert x.pop("dummy_tensor").equal(y.pop("dummy_tensor"))
        assert x == y


def test_pickle_roundtrip():
    import pickle

    ds = make(BIG_SPACE_MIX)
    copy = pickle.loads(pickle.dumps(ds))
    assert copy[5]["extra_info"] == ds[5]["extra_info"]


def test_mix_does_not_depend_on_config_key_order():
    forward = make(dict(BIG_SPACE_MIX))
    backward = make(dict(reversed(list(BIG_SPACE_MIX.items()))))
    assert questions(forward) == questions(backward)


def test_splits_share_no_questions():
    sizes = {"train_size": 2000, "val_size": 500, "eval_size": 500}
    texts = {split: set(questions(make(BIG_SPACE_MIX, split=split, **sizes))) for split in SPLITS}
    assert len(texts["train"]) > 1990 and len(texts["val"]) > 495
    assert not texts["train"] & texts["val"]
    assert not texts["train"] & texts["eval"]
    assert not texts["val"] & texts["eval"]


def test_base_seed_changes_items():
    assert questions(make(BIG_SPACE_MIX, seed=1)) != questions(make(BIG_SPACE_MIX, seed=2))


@given(
    base=st.integers(0, SPLIT_STRIDE - 1),
    size=st.integers(1, MAX_SPLIT_SIZE),
    names=st.lists(st.sampled_from(sorted(DATASETS)), min_size=1, max_size=4),
)
def test_generator_seed_ranges_are_disjoint(base, size, names):
    # Item j of a dataset with seed s comes from Random(s + j), j < size.
    ranges = {s: [(dataset_seed(base, s, n), dataset_seed(base, s, n) + size) for n in names] for s in SPLITS}
    for i, a in enumerate(SPLITS):
        for b in SPLITS[i + 1 :]:
            for lo_a, hi_a in ranges[a]:
                for lo_b, hi_b in ranges[b]:
                    assert hi_a <= lo_b or hi_b <= lo_a
    assert all(0 <= lo and hi <= 2**32 for r in ranges.values() for lo, hi in r)


def test_weights_respected():
    ds = make({"chain_sum": {"weight": 3}, "leg_counting": {"weight": 1}}, train_size=2000)
    counts = collections.Counter(ds[i]["extra_info"]["dataset"] for i in range(len(ds)))
    assert abs(counts["chain_sum"] - 1500) < 100  # std is about 19
    assert counts["chain_sum"] + counts["leg_counting"] == 2000


def test_zero_weight_never_picked():
    ds = make({"chain_sum": {"weight": 1}, "leg_counting": {"weight": 0}}, train_size=300)
    assert {ds.pick(i) for i in range(len(ds))} == {"chain_sum"}


# --- lengths and indexing ------------------------------------------------------------------------


def test_len_is_split_size_and_max_samples_caps():
    assert [len(make({"chain_sum": {}}, split=s)) for s in SPLITS] == [100, 20, 20]
    assert len(make({"chain_sum": {}}, max_samples=7)) == 7
    assert len(make({"chain_sum": {}}, max_samples=1000)) == 100
    ds = make({"chain_sum": {}}, max_samples=7)
    with pytest.raises(IndexError):
        ds[7]
    with pytest.raises(IndexError):
        ds[-1]
    assert ds[np.int64(2)]["index"] == 2


def test_construction_generates_nothing(monkeypatch):
    """Construction only builds the sub-datasets; knight_swap items are made in __getitem__."""
    calls = []
    for name in ["knight_swap", "chain_sum"]:
        cls = DATASETS[name][0]
        original = cls.__getitem__

        def counting(self, idx, _original=original, _name=name):
            calls.append((_name, idx))
            return _original(self, idx)

        monkeypatch.setattr(cls, "__getitem__", counting)
    ds = make({"knight_swap": {"weight": 1}, "chain_sum": {"weight": 1}}, train_size=10000)
    assert calls == []
    i = next(i for i in range(100) if ds.pick(i) == "knight_swap")
    assert calls == []  # picking a dataset generates nothing either
    item = ds[i]
    assert calls == [("knight_swap", i)]
    assert item["data_source"] == "reasoning_gym/knight_swap"


# --- configuration errors ------------------------------------------------------------------------


def test_data_files_forms():
    cfg = OmegaConf.create({"reasoning_gym": {"datasets": {"chain_sum": {}}}})
    for files in ["reasoning_gym://val", ["reasoning_gym://val"], ListConfig(["reasoning_gym://val"])]:
        assert ReasoningGymDataset(files, None, cfg).split == "val"


@pytest.mark.parametrize(
    "files",
    ["reasoning_gym://test", "reasoning_gym://", "data/train.parquet", ["reasoning_gym://train"] * 2, [], None, 3],
)
def test_bad_data_files(files):
    cfg = OmegaConf.create({"reasoning_gym": {"datasets": {"chain_sum": {}}}})
    with pytest.raises(ValueError, match="reasoning_gym://train") as info:
        ReasoningGymDataset(files, None, cfg)
    assert repr(files) in str(info.value)


def test_unknown_dataset_suggests_close_match():
    with pytest.raises(ValueError, match="chain_sums") as info:
        make({"chain_sums": {}})
    assert "Did you mean 'chain_sum'" in str(info.value)


@pytest.mark.parametrize(
    "datasets, match",
    [
        ({"chain_sum": {"weight": -1}}, "weight"),
        ({"chain_sum": {"weight": 0}, "leg_counting": {"weight": 0}}, "positive"),
        ({"chain_sum": {"weight": "heavy"}}, "weight"),
        ({"chain_sum": {"weight": float("inf")}}, "weight"),
        ({"chain_sum": {"config": {"min_terms": 5, "max_terms": 2}}}, "chain_sum"),
        ({"chain_sum": {"config": {"no_such_option": 1}}}, "no_such_option"),
        ({"chain_sum": {"config": {"seed": 1}}}, "seed"),
        ({"chain_sum": {"config": {"size": 10}}}, "size"),
        ({"chain_sum": {"wieght": 1}}, "wieght"),
        ({}, "datasets"),
    ],
)
def test_bad_dataset_specs(datasets, match):
    with pytest.raises(ValueError, match=match):
        make(datasets)


def test_missing_section_and_bad_seed_or_size():
    with pytest.raises(ValueError, match="reasoning_gym"):
        ReasoningGymDataset("reasoning_gym://train", None, OmegaConf.create({"train_batch_size": 8}))
    with pytest.raises(ValueError, match="seed"):
        make({"chain_sum": {}}, seed=-1)
    with pytest.raises(ValueError, match="seed"):
        make({"chain_sum": {}}, seed=SPLIT_STRIDE)
    with pytest.raises(ValueError, match="seed"):
        make({"chain_sum": {}}, seed=None)
    with pytest.raises(ValueError, match="train_size"):
        make({"chain_sum": {}}, train_size=0)
    with pytest.raises(ValueError, match="train_size"):
        make({"chain_sum": {}}, train_size="many")
    with pytest.raises(ValueError, match="val_size"):
        make({"chain_sum": {}}, split="val", val_size=MAX_SPLIT_SIZE + 1)


# --- JSON safety ---------------------------------------------------------------------------------


def test_to_json_safe():
    entry = {
        "t": (1, (2, 3)),
        "s": {3, 1, 2},
        "mixed": {1, "a"},
        "np": [np.int64(4), np.float32(0.5), np.bool_(True), np.arange(3)],
        (1, 2): "tuple key",
        5: "int key",
        "obj": object,
    }
    safe = to_json_safe(entry)
    assert safe["t"] == [1, [2, 3]]
    assert safe["s"] == [1, 2, 3]
    assert sorted(map(str, safe["mixed"])) == ["1", "a"]
    assert safe["np"] == [4, 0.5, True, [0, 1, 2]]
    assert safe["(1, 2)"] == "tuple key" and safe["5"] == "int key"
    assert isinstance(safe["obj"], str)
    assert json.loads(json.dumps(safe)) == safe


def test_distinct_items_counts_a_files_rows_and_not_a_generator(math_data):
    section = {
        "datasets": {
            "chain_sum": {},
            "gsm8k": {"source": {"format": "gsm8k", "val": str(math_data / "gsm8k" / "test.parquet")}},
        },
        "val_size": 4,
    }
    dataset = ReasoningGymDataset("reasoning_gym://val", config=OmegaConf.create({"reasoning_gym": section}))
    assert dataset.distinct_items("chain_sum") is None
    assert dataset.distinct_items("gsm8k") == 2  # the fixture's test file holds two usable rows
