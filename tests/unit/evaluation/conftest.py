import pytest

from rg_verl.tiny_model import build_tiny_model


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """The tiny random model, built once for every evaluation test that generates."""
    return build_tiny_model(tmp_path_factory.mktemp("evaluation") / "tiny")
