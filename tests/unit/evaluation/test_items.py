"""Tests of rg_verl.evaluation.items: which items an evaluation sees, and the prompts they are sent as."""

from __future__ import annotations

import pytest
from reasoning_gym.utils import SYSTEM_PROMPTS

from rg_verl.common.names import SPLIT_STRIDE
from rg_verl.data.dataset import dataset_seed
from rg_verl.evaluation.config import parse_config
from rg_verl.evaluation.items import eval_datasets, prompt_messages
from tests.unit.evaluation.fakes import NUM_ITEMS, small_config


def test_eval_items_come_from_the_evaluation_seed_space():
    config = parse_config(small_config())
    datasets = eval_datasets(config)
    assert [(d.key, len(d)) for d in datasets] == [
        ("arithmetic/chain_sum", 3),
        ("arithmetic/leg_counting", 2),
        ("algorithmic/spell_backward", 2),
    ]
    assert sum(len(d) for d in datasets) == NUM_ITEMS
    item = datasets[0][0]
    assert item["extra_info"]["split"] == "eval" and item["data_source"] == "reasoning_gym/chain_sum"
    seed = dataset_seed(1, "eval", "chain_sum")
    assert 2 * SPLIT_STRIDE <= seed < 3 * SPLIT_STRIDE  # above the train and validation seeds of base seed 1
    assert eval_datasets(parse_config(small_config()))[0][2] == datasets[0][2]  # deterministic
    assert datasets[0].item_key(2) == "arithmetic/chain_sum/2"
    with pytest.raises(IndexError):
        datasets[0][3]


def test_file_rows_are_evaluated_once_each(math_data):
    gsm8k = {"format": "gsm8k", "eval": str(math_data / "gsm8k/train.parquet")}
    entries = [{"dataset": "gsm8k", "size": 100, "source": gsm8k}, {"dataset": "gsm8k_two", "size": 2, "source": gsm8k}]
    (everything, two) = eval_datasets(parse_config(small_config(categories=[{"category": "m", "datasets": entries}])))
    assert (len(everything), len(two)) == (4, 2)  # size caps the rows; it never repeats one
    questions = [everything[i]["extra_info"]["entry"]["question"] for i in range(len(everything))]
    assert len(set(questions)) == 4


def test_the_developer_prompt_is_sent_in_its_role():
    config = parse_config(small_config(developer_role="developer"))
    item = eval_datasets(config)[0][0]
    question = item["extra_info"]["entry"]["question"]
    assert prompt_messages(item, config) == [
        {"role": "developer", "content": SYSTEM_PROMPTS["default"]},
        {"role": "user", "content": question},
    ]
    config = parse_config(small_config(developer_prompt=None))
    assert prompt_messages(item, config) == [{"role": "user", "content": question}]
