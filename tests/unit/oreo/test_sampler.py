"""Tests of rg_verl.oreo.sampler through rg-verl oreo collect: backends without ids, with other prompt ids,
scoring in a worker thread, and a failure while scoring."""

from __future__ import annotations

import dataclasses
import json
import threading

import pytest

from rg_verl.evaluation.backends import Completion, create_backend
from rg_verl.oreo import collect as collect_module
from rg_verl.oreo import sampler as sampler_module
from rg_verl.oreo.collect import main
from rg_verl.oreo.trajectories import MANIFEST
from tests.unit.oreo.collecting import MAX_TOKENS, TRAIN, argv, read_rows, shard_bytes


class TextOnlyBackend:
    """A backend that, like the openai one, gives text and a token count but no ids."""

    def __init__(self, settings):
        self.max_tokens = None

    def generate(self, prompts, n, sampling):
        self.max_tokens = sampling.max_tokens
        return [[Completion("<think>x</think><answer>7</answer>", 5), Completion("no", MAX_TOKENS)] for _ in prompts]

    def close(self):
        pass


def test_without_backend_ids_the_text_is_retokenised(tiny_model, tmp_path, monkeypatch):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    monkeypatch.setattr(collect_module, "create_backend", TextOnlyBackend)
    out = tmp_path / "out"
    assert main(argv(tiny_model, out, "--samples", "2", "--val-items", "0", "--backend", "openai")) == 0
    rows = read_rows(out / "train")
    assert {r["ids_source"] for r in rows} == {"retokenized"}
    done, cut = rows[0], rows[1]
    text_ids = tokenizer(done["response"], add_special_tokens=False)["input_ids"]
    assert done["finished"] and done["response_ids"] == text_ids + [tokenizer.eos_token_id]
    assert done["format_ok"] == 1.0 and done["answer_found"] == 1.0
    assert not cut["finished"] and cut["response_ids"] == tokenizer("no", add_special_tokens=False)["input_ids"]
    assert json.loads((out / MANIFEST).read_text())["backend"] == "openai"


class OtherTemplateBackend:
    """The real hf backend, conditioning on other prompt ids than the chat template's (another template)."""

    def __init__(self, settings):
        self.inner = create_backend(settings)

    def generate(self, prompts, n, sampling):
        outputs = self.inner.generate(prompts, n, sampling)
        return [[dataclasses.replace(c, prompt_token_ids=c.prompt_token_ids[1:]) for c in out] for out in outputs]

    def close(self):
        self.inner.close()


def test_a_backend_that_conditions_on_other_prompt_ids_stops_the_run(tiny_model, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(collect_module, "create_backend", OtherTemplateBackend)
    out = tmp_path / "out"
    with pytest.raises(RuntimeError, match="conditions on other prompt ids than the chat template's"):
        main(argv(tiny_model, out, "--val-items", "0"))
    assert not shard_bytes(out)  # nothing written from it


def test_batches_are_scored_in_a_worker_thread_into_the_rows_of_a_sequential_run(tiny_model, tmp_path, monkeypatch):
    """Each batch is scored off the main thread (while the next samples); the rows are those scored in order."""
    threads, scored = set(), []
    real = sampler_module.score_with

    def recording(config, data_source, text, *args, **kwargs):
        threads.add(threading.current_thread().name)
        scored.append(text)
        return real(config, data_source, text, *args, **kwargs)

    monkeypatch.setattr(sampler_module, "score_with", recording)
    out = tmp_path / "out"
    assert main(argv(tiny_model, out, "--val-items", "0", "--shard-size", str(TRAIN))) == 0
    assert threads and all(name.startswith("oreo-score") for name in threads)
    rows = read_rows(out / "train")
    assert [r["response"] for r in rows] == scored  # one shard of 4 batches, scored and kept in order
    monkeypatch.setattr(sampler_module, "score_with", real)
    again = tmp_path / "again"
    assert main(argv(tiny_model, again, "--val-items", "0", "--shard-size", str(TRAIN))) == 0
    assert shard_bytes(again) == shard_bytes(out)


def test_a_failure_while_scoring_stops_the_run_and_writes_no_partial_shard(tiny_model, tmp_path, monkeypatch, capsys):
    calls = []

    def failing(*args, **kwargs):
        calls.append(threading.current_thread().name)
        if len(calls) > 4:  # in the second batch of the first shard
            raise ValueError("scorer broke")
        return {"score": 0.0}

    monkeypatch.setattr(sampler_module, "score_with", failing)
    out = tmp_path / "out"
    assert main(argv(tiny_model, out, "--val-items", "0")) == 1
    assert "error: scorer broke" in capsys.readouterr().err
    assert not shard_bytes(out)
    assert json.loads((out / MANIFEST).read_text())["complete"] is False
