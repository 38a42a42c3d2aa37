import pytest
import torch


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def math_data(tmp_path_factory):
    """Small GSM8K and MATH files where the shipped math configs look for them (``RG_VERL_DATA``)."""
    from tests.math_fixtures import write_math_dirs

    root = write_math_dirs(tmp_path_factory.mktemp("math_data"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RG_VERL_DATA", str(root))
        yield root
