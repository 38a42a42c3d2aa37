"""Every reasoning-gym generator outside INIT_SEEDED gives the same items when reseeded (the guard behind
rg_verl.data.candidates.INIT_SEEDED), over all of reasoning-gym's registry."""

from __future__ import annotations

import pytest
from reasoning_gym.factory import DATASETS

from rg_verl.data.candidates import INIT_SEEDED
from tests.unit.data.test_candidates import same_items

pytestmark = pytest.mark.slow


def test_every_registered_generator_outside_init_seeded_can_be_reseeded():
    """The guard behind INIT_SEEDED: a new reasoning-gym generator that draws from its seed when built fails here."""
    failures = []
    for name in sorted(set(DATASETS) - INIT_SEEDED):
        try:
            same_items(name, size=4)
        except AssertionError:
            failures.append(name)
    assert failures == [], f"add to INIT_SEEDED (or check for address-dependent text): {failures}"
