"""verl's value-model loader on CPU: the model config's attention, never flash-attention."""

import subprocess
import sys

import pytest

from rg_verl.cpu.value_model import attention_implementation, load_valuehead_model
from tests.helpers import REPO


class Config:
    def __init__(self, name):
        self._attn_implementation = name


@pytest.mark.parametrize(
    ("asked", "used"), [("sdpa", "sdpa"), ("eager", "eager"), (None, "sdpa"), ("flash_attention_2", "sdpa")]
)
def test_attention_implementation(asked, used):
    assert attention_implementation(Config(asked)) == used


def test_loads_a_causal_lm_as_a_one_label_token_classifier(tmp_path):
    from transformers import AutoConfig

    from rg_verl.cpu.tiny_model import build_tiny_model

    path = build_tiny_model(tmp_path / "tiny")
    config = AutoConfig.from_pretrained(path, num_labels=1)
    config._attn_implementation = "sdpa"
    model = load_valuehead_model(str(path), None, config, False)
    assert type(model).__name__.endswith("ForTokenClassification")
    assert model.score.out_features == 1 and model.config._attn_implementation == "sdpa"


def test_the_cpu_platform_installs_it_in_verl():
    code = (
        "import rg_verl.cpu.platform, verl.utils.model as m, rg_verl.cpu.value_model as v;"
        "assert m.load_valuehead_model is v.load_valuehead_model"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_verl_alone_keeps_its_own_loader():
    code = "import verl.utils.model as m; assert m.load_valuehead_model.__module__ == 'verl.utils.model'"
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
