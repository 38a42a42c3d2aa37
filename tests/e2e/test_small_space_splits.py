"""The small-space mix keeps its splits apart at full size: 5,000 training items and 200 validation and evaluation
items (jugs costs about 5 ms an item and a held-out item searches about 20 candidates: about 20 s in all).
tests/unit/data/test_dataset.py runs the same check at 1,000-100-100."""

from __future__ import annotations

import pytest

from tests.unit.data.test_dataset import test_the_small_space_mix_shares_no_question_between_splits as check_splits

pytestmark = pytest.mark.slow


def test_the_small_space_mix_shares_no_question_between_splits_at_full_size():
    check_splits({"train": 5000, "val": 200, "eval": 200})
