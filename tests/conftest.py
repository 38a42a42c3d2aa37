import pytest
import torch


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def search_cache(tmp_path_factory, monkeypatch):
    """Each test keeps its held-out searches in a folder of its own (rg_verl.data.search_cache), not in the
    user's cache: a search made under a test's patches never reaches another test."""
    folder = tmp_path_factory.mktemp("searches")
    monkeypatch.setenv("RG_VERL_SEARCH_CACHE", str(folder))
    return folder


@pytest.fixture(scope="session", autouse=True)
def math_data(tmp_path_factory):
    """Small GSM8K and MATH files where the shipped math configs look for them (``RG_VERL_DATA``)."""
    from tests.math_fixtures import write_math_dirs

    root = write_math_dirs(tmp_path_factory.mktemp("math_data"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RG_VERL_DATA", str(root))
        yield root
