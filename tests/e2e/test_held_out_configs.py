"""Every shipped config: no question of its first 10,000 training items is a validation or evaluation item.

The items are the ones a run and the evaluator get: ``ReasoningGymDataset`` of each split, built from
the composed config. Each item's question also lies in its split's share (``rg_verl.data.holdout``), which
is what keeps it apart from the training items of *every* run, not only of this one. The math configs read
the test fixtures' GSM8K and MATH files (their validation files share no question with their training files).
"""

import pytest

from rg_verl.data.dataset import ReasoningGymDataset
from rg_verl.data.holdout import normalise, split_of
from rg_verl.vocab import SPLIT_URI
from tests.math_fixtures import write_math_dirs
from tests.unit.test_shipped_configs import CONFIGS, composed, config_id

TRAIN_ITEMS = 10_000


def questions(config, split: str, count: int) -> list[str]:
    dataset = ReasoningGymDataset(f"{SPLIT_URI}{split}", None, config.data)
    items = [dataset[i] for i in range(min(count, len(dataset)))]
    generated = [item for item in items if item["data_source"].startswith("reasoning_gym/")]
    assert all(split_of(item["raw_prompt"][-1]["content"]) == split for item in generated), split
    return [normalise(item["raw_prompt"][-1]["content"]) for item in items]


@pytest.mark.slow
@pytest.mark.parametrize("path", CONFIGS, ids=config_id)
def test_no_question_is_shared_between_training_validation_and_evaluation(path, tmp_path, monkeypatch):
    monkeypatch.setenv("RG_VERL_DATA", str(write_math_dirs(tmp_path / "data")))
    config = composed(path)
    train = set(questions(config, "train", TRAIN_ITEMS))
    val = set(questions(config, "val", config.reasoning_gym.val_size))
    evaluation = set(questions(config, "eval", config.reasoning_gym.eval_size))
    assert not train & val, sorted(train & val)[:3]
    assert not train & evaluation, sorted(train & evaluation)[:3]
    assert not val & evaluation, sorted(val & evaluation)[:3]
