"""A tiny local model shared by the OREO tests (built once per session, no hub)."""

import pytest

from rg_verl.tiny_model import build_tiny_model


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("oreo") / "tiny")
