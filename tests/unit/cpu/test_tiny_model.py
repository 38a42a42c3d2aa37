"""Tests for rg_verl.cpu.tiny_model: building, loading and reusing the tiny Qwen2 model."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from rg_verl.common.names import TAGS
from rg_verl.common.schema import ConfigError
from rg_verl.cpu import tiny_model as tiny


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny.build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def _state_dict(path: Path) -> dict[str, torch.Tensor]:
    return AutoModelForCausalLM.from_pretrained(path).state_dict()


def test_build_layout_and_config(model_dir: Path) -> None:
    names = {p.name for p in model_dir.iterdir()}
    assert {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json"} <= names
    assert not [p for p in model_dir.parent.iterdir() if ".tmp-" in p.name]  # temp dir cleaned up
    tok = AutoTokenizer.from_pretrained(model_dir)
    config = AutoConfig.from_pretrained(model_dir)
    assert config.model_type == "qwen2" and config.tie_word_embeddings
    assert config.vocab_size >= len(tok) and config.vocab_size % 8 == 0
    assert config.eos_token_id == tok.eos_token_id == tok.convert_tokens_to_ids("<|im_end|>")
    assert config.pad_token_id == tok.pad_token_id == tok.convert_tokens_to_ids("<|endoftext|>")


def test_load_and_generate(model_dir: Path) -> None:
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    assert model.dtype == torch.float32
    assert model.generation_config.eos_token_id == tok.convert_tokens_to_ids("<|im_end|>")
    assert model.generation_config.pad_token_id == tok.pad_token_id
    enc = tok(["What is 2 + 3?", "Spell backward: cat"], return_tensors="pt", padding=True)
    out = model.generate(**enc, max_new_tokens=4, min_new_tokens=4, do_sample=False)
    assert out.shape == (2, enc["input_ids"].shape[1] + 4)
    assert int(out.max()) < model.config.vocab_size


def test_chat_template_round_trip(model_dir: Path) -> None:
    tok = AutoTokenizer.from_pretrained(model_dir)
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]
    text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert text == "<|im_start|>system\ns<|im_end|>\n<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == text
    no_prompt = tok.apply_chat_template(messages + [{"role": "assistant", "content": "a"}], tokenize=False)
    assert no_prompt.endswith("<|im_start|>assistant\na<|im_end|>\n")


def test_special_and_tag_tokens_are_single_ids(model_dir: Path) -> None:
    tok = AutoTokenizer.from_pretrained(model_dir)
    ids = {}
    for t in ["<|endoftext|>", "<|im_start|>", "<|im_end|>", *TAGS]:
        (ids[t],) = tok.encode(t, add_special_tokens=False)
    assert len(set(ids.values())) == len(ids)
    completion = "<think>\nadd them\n</think>\n<answer>5</answer><|im_end|>"
    encoded = tok.encode(completion, add_special_tokens=False)
    assert all(ids[t] in encoded for t in TAGS)
    # Tags survive skip_special_tokens; the ChatML markers do not.
    assert tok.decode(encoded, skip_special_tokens=True) == completion.removesuffix("<|im_end|>")


def test_deterministic(model_dir: Path, tmp_path: Path) -> None:
    again = tiny.build_tiny_model(tmp_path / "again")
    assert (again / "tokenizer.json").read_bytes() == (model_dir / "tokenizer.json").read_bytes()
    ref, same = _state_dict(model_dir), _state_dict(again)
    assert ref.keys() == same.keys() and all(torch.equal(ref[k], same[k]) for k in ref)
    other = _state_dict(tiny.build_tiny_model(tmp_path / "other", seed=1))
    assert not torch.equal(ref["model.layers.0.mlp.up_proj.weight"], other["model.layers.0.mlp.up_proj.weight"])


def test_ensure_reuses_existing(model_dir: Path) -> None:
    mtimes = {p.name: p.stat().st_mtime_ns for p in model_dir.iterdir()}
    assert tiny.ensure_tiny_model(model_dir) == model_dir
    assert {p.name: p.stat().st_mtime_ns for p in model_dir.iterdir()} == mtimes


def test_build_refuses_non_empty_dir(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.mkdir()
    (target / "keep.txt").write_text("x")
    with pytest.raises(FileExistsError, match="not empty"):
        tiny.build_tiny_model(target)
    with pytest.raises(FileExistsError):  # incomplete, non-empty: ensure must not clobber it
        tiny.ensure_tiny_model(target)
    assert [p.name for p in target.iterdir()] == ["keep.txt"]


def test_ensure_builds_into_empty_dir_with_kwargs(tmp_path: Path) -> None:
    target = tmp_path / "empty"
    target.mkdir()
    out = tiny.ensure_tiny_model(target, seed=3, hidden_size=32, num_layers=1, vocab_size=512)
    config = json.loads((out / "config.json").read_text())
    assert (config["hidden_size"], config["num_hidden_layers"], config["vocab_size"]) == (32, 1, 512)


# Each of the two builders, once its model is written, waits at the publishing step until the other is there
# too, so both have built (neither found a finished model) and their renames race: one wins, one uses its model.
RACE = """
import logging, os, sys, time
from pathlib import Path

import rg_verl.common.atomic as atomic
from rg_verl.cpu.tiny_model import ensure_tiny_model

barrier, target = Path(sys.argv[1]), Path(sys.argv[2])
publish = atomic.publish_dir


def publish_when_both_built(staging, out, replace=False):
    (barrier / str(os.getpid())).touch()
    deadline = time.monotonic() + 300
    while len(list(barrier.iterdir())) < 2:
        if time.monotonic() > deadline:
            sys.exit("the other builder never reached the rename")
        time.sleep(0.05)
    publish(staging, out, replace)


atomic.publish_dir = publish_when_both_built
logging.getLogger("rg_verl.cpu.tiny_model").setLevel(logging.DEBUG)
logging.getLogger("rg_verl.cpu.tiny_model").addHandler(logging.StreamHandler())
print(ensure_tiny_model(target, num_layers=1))
"""


def test_concurrent_ensure_builds_twice_and_the_loser_uses_the_winners_model(tmp_path: Path) -> None:
    target, barrier = tmp_path / "shared", tmp_path / "barrier"
    barrier.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(tiny.__file__).parents[2]), *sys.path])}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACE, str(barrier), str(target)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [proc.communicate(timeout=600) for proc in procs]
    for proc, (stdout, stderr) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, stderr[-3000:]
        assert stdout.strip() == str(target.resolve())
    assert len(list(barrier.iterdir())) == 2  # both built a model
    lost = [stderr for _, stderr in outputs if "Another process built the tiny model" in stderr]
    assert len(lost) == 1, [stderr[-500:] for _, stderr in outputs]  # exactly one lost the rename
    assert sorted(p.name for p in tmp_path.iterdir()) == ["barrier", "shared"]  # no staging folder left
    assert AutoModelForCausalLM.from_pretrained(target).config.num_hidden_layers == 1


@pytest.mark.parametrize(
    "options, message",
    [
        ({"hidden": 8}, r"^tiny_model\.hidden: unknown key \(did you mean 'hidden_size'\?\); valid keys: seed, "),
        ({"vocab_size": 100}, rf"^tiny_model\.vocab_size: 100 is not an integer in \[{tiny.MIN_VOCAB_SIZE}, "),
        ({"num_heads": 3}, r"^tiny_model\.hidden_size: 64 is not num_heads=3 times an even head size"),
        ({"warm_start": {"stpes": 2}}, r"^warm_start\.stpes: unknown key \(did you mean 'steps'\?\)"),
    ],
)
def test_build_options_are_checked_before_anything_is_built(tmp_path: Path, options, message) -> None:
    with pytest.raises(ConfigError, match=message):
        tiny.build_tiny_model(tmp_path / "model", **options)
    with pytest.raises(ConfigError, match=message):
        tiny.ensure_tiny_model(tmp_path / "model", **options)
    assert list(tmp_path.iterdir()) == []  # no model, no staging folder


def test_the_least_vocab_holds_the_bytes_and_every_added_token() -> None:
    from tokenizers import pre_tokenizers

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    assert tiny.MIN_VOCAB_SIZE == len(alphabet) + len(tiny.SPECIAL_TOKENS) + len(TAGS)


def test_the_options_declare_their_defaults_and_help() -> None:
    fields = dataclasses.fields(tiny.TinyModelOptions)
    assert tiny.TinyModelOptions().hidden_size == 64 and all(f.metadata["help"] for f in fields)
    section = [f.name for f in dataclasses.fields(tiny.TinyModelConfig)]
    assert section == [f.name for f in fields] + ["build_if_missing", "warm_start"]


def test_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "cli"
    tiny.main([str(target), "--seed", "2", "--hidden-size", "32"])
    assert "parameters" in capsys.readouterr().out and AutoConfig.from_pretrained(target).hidden_size == 32
    with pytest.raises(FileExistsError):
        tiny.main([str(target)])
    tiny.main([str(target), "--force", "--num-layers", "1"])
    assert AutoConfig.from_pretrained(target).num_hidden_layers == 1


def test_a_thinking_template_opens_the_think_block_and_the_warm_start_writes_what_follows(tmp_path: Path) -> None:
    from rg_verl.common.chat_template import response_prefix

    out = tiny.build_tiny_model(tmp_path / "m", thinking_template=True, warm_start={"steps": 2, "num_prompts": 8})
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert response_prefix(tokenizer) == "<think>\n"
    chat = [{"role": "user", "content": "q"}]
    prompt = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
    assert prompt.endswith("<|im_start|>assistant\n<think>\n")
    # a model built before the option existed is reused: its record lacks the option, which was then off
    record = json.loads((out / tiny.WARM_START_RECORD).read_text())
    assert record["options"]["thinking_template"] is True
