"""The value model's starting folder: the policy's backbone, a zero one-label head, a token-classification config."""

import json

import torch
from transformers import AutoModelForCausalLM, AutoModelForTokenClassification

from rg_verl.oreo.value_init import RECORD, prepare_value_model, token_classification_architecture


def test_architecture_names():
    assert token_classification_architecture(["Qwen2ForCausalLM"]) == ["Qwen2ForTokenClassification"]
    assert token_classification_architecture(["Qwen2ForTokenClassification"]) == ["Qwen2ForTokenClassification"]
    assert token_classification_architecture(None) is None


def test_zero_head_gives_zero_values_and_keeps_the_backbone(tiny_model, tmp_path):
    out = prepare_value_model(str(tiny_model), tmp_path / "critic")
    critic = AutoModelForTokenClassification.from_pretrained(out).eval()
    assert critic.config.num_labels == 1
    assert json.loads((out / "config.json").read_text())["architectures"] == ["Qwen2ForTokenClassification"]
    ids = torch.tensor([[5, 17, 99, 3]])
    with torch.no_grad():
        assert torch.equal(critic(ids).logits, torch.zeros(1, 4, 1))
    policy = AutoModelForCausalLM.from_pretrained(tiny_model)
    torch.testing.assert_close(critic.model.embed_tokens.weight, policy.model.embed_tokens.weight)
    assert (out / "tokenizer.json").is_file()


def test_kept_head_is_not_zero_and_the_folder_is_reused_only_for_the_same_request(tiny_model, tmp_path):
    out = tmp_path / "critic"
    prepare_value_model(str(tiny_model), out, zero_head=False)
    head = AutoModelForTokenClassification.from_pretrained(out).score.weight
    assert head.abs().sum() > 0
    stamp = (out / "model.safetensors").stat().st_mtime_ns
    prepare_value_model(str(tiny_model), out, zero_head=False)  # same request: reused
    assert (out / "model.safetensors").stat().st_mtime_ns == stamp
    prepare_value_model(str(tiny_model), out, zero_head=True)  # another: rebuilt
    assert json.loads((out / RECORD).read_text())["zero_head"] is True
    assert AutoModelForTokenClassification.from_pretrained(out).score.weight.abs().sum() == 0


def test_an_interrupted_write_is_rebuilt(tiny_model, tmp_path):
    out = prepare_value_model(str(tiny_model), tmp_path / "critic")
    (out / RECORD).unlink()  # as if the write stopped before the record
    (out / "model.safetensors").write_bytes(b"torn")
    prepare_value_model(str(tiny_model), out)
    AutoModelForTokenClassification.from_pretrained(out)
