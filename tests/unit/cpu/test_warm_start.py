"""Tests for rg_verl.cpu.warm_start: the tiny model's supervised warm start, its options and its record.

Most tests drive :func:`run_warm_start` with a recording stand-in for the model and the tokenizer, so
they see every batch it trains on; the others train the real tiny model for a few steps.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
from pathlib import Path
from types import SimpleNamespace as NS

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from reasoning_gym.utils import SYSTEM_PROMPTS

from rg_verl.common.names import MAX_SEED, SPLIT_STRIDE, SPLITS
from rg_verl.common.schema import ConfigError
from rg_verl.cpu import tiny_model as tiny
from rg_verl.cpu.warm_start import (
    MAX_WARM_START_SEED,
    WARM_START_DEFAULTS,
    WARM_START_RECORD,
    WarmStartOptions,
    run_warm_start,
    warm_start_options,
    warm_start_response,
)
from rg_verl.reward import extract_answer

# ---- options


def test_warm_start_options_are_checked_and_recorded(tmp_path, tiny_dir):
    with pytest.raises(ConfigError, match=r"^warm_start\.stpes: unknown key"):
        warm_start_options({"stpes": 3})
    with pytest.raises(ConfigError, match=r"^warm_start\.format_rate: 1\.5 is above 1\.0"):
        warm_start_options({"format_rate": 1.5})
    options = warm_start_options({"datasets": {"chain_sum": {"weight": 2.0, "config": {"min_terms": 2}}}})
    assert (
        options["datasets"] == {"chain_sum": {"min_terms": 2}} and options["steps"] == WARM_START_DEFAULTS["steps"]
    )

    small = {"hidden_size": 32, "num_layers": 1}
    warm = {"steps": 2, "batch_size": 2, "num_prompts": 4}
    built = tiny.ensure_tiny_model(tmp_path / "warm", warm_start=warm, **small)
    record = json.loads((built / WARM_START_RECORD).read_text())
    assert record["options"]["warm_start"] == warm_start_options(warm)
    assert record["options"]["hidden_size"] == 32
    assert tiny.ensure_tiny_model(built, warm_start=warm, **small) == built  # same options: reused
    for other in ({"warm_start": {**warm, "format_rate": 0.5}, **small}, small):
        with pytest.raises(FileExistsError, match="other options"):
            tiny.ensure_tiny_model(built, **other)
    # the record holds the losses of the run, and a plain model has no record
    assert set(record["losses"]) == {"loss_first", "loss_last"}
    assert not (tiny_dir / WARM_START_RECORD).exists()



def test_no_options_mean_no_warm_start_and_empty_options_the_defaults():
    assert warm_start_options(None) is None
    assert warm_start_options({}) == WARM_START_DEFAULTS == dataclasses.asdict(WarmStartOptions())
    assert WARM_START_DEFAULTS["datasets"] == {"chain_sum": {}} and WARM_START_DEFAULTS["system_prompt"] == "default"


def test_options_are_plain_json_and_never_alias_the_defaults():
    options = warm_start_options({"steps": 3, "lr": 1, "format_rate": 1, "datasets": ("chain_sum",)})
    assert options == json.loads(json.dumps(options))  # what the record saves compares equal to it
    assert (options["steps"], options["lr"], options["format_rate"]) == (3, 1.0, 1.0)
    assert [type(options[key]) for key in ("steps", "lr", "format_rate")] == [int, float, float]
    options["datasets"]["chain_sum"]["min_terms"] = 9
    assert WARM_START_DEFAULTS["datasets"] == {"chain_sum": {}}
    assert warm_start_options({})["datasets"] == {"chain_sum": {}}


@pytest.mark.parametrize(
    ("datasets", "expected"),
    [
        ("chain_sum", {"chain_sum": {}}),
        (["chain_sum", "leg_counting"], {"chain_sum": {}, "leg_counting": {}}),
        ({"chain_sum": {"min_terms": 2}}, {"chain_sum": {"min_terms": 2}}),
        ({"chain_sum": None}, {"chain_sum": {}}),
        # the shape of reasoning_gym.datasets: the weight is dropped (datasets take turns)
        ({"chain_sum": {"weight": 2.0, "config": {"min_terms": 2}}}, {"chain_sum": {"min_terms": 2}}),
        ({"chain_sum": {"weight": 1.0}}, {"chain_sum": {}}),
        ({"chain_sum": {"config": None}}, {"chain_sum": {}}),
    ],
)
def test_datasets_take_every_documented_shape(datasets, expected):
    assert warm_start_options({"datasets": datasets})["datasets"] == expected


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"stpes": 3}, r"^warm_start\.stpes: unknown key \(did you mean 'steps'\?\); valid keys: steps, batch_size, "),
        ({"steps": 0}, r"^warm_start\.steps: 0 is not an integer in \[1, \d+\]; set one$"),
        ({"steps": 2.5}, r"^warm_start\.steps: 2\.5 is not an integer"),
        ({"batch_size": 0}, r"^warm_start\.batch_size: 0 is not an integer in \[1, \d+\]"),
        ({"num_prompts": -2}, r"^warm_start\.num_prompts: -2 is not an integer in \[1, \d+\]"),
        ({"seed": -1}, r"^warm_start\.seed: -1 is not an integer in \[0, \d+\]"),
        ({"lr": -0.1}, r"^warm_start\.lr: -0\.1 is below 0\.0"),
        ({"format_rate": 1.5}, r"^warm_start\.format_rate: 1\.5 is above 1\.0; set a value <= 1\.0$"),
        ({"format_rate": -0.1}, r"^warm_start\.format_rate: -0\.1 is below 0\.0"),
        ({"format_rate": math.nan}, r"^warm_start\.format_rate: nan is not a finite number"),
        ({"system_prompt": 3}, r"^warm_start\.system_prompt: 3 is not text"),
        ({"datasets": []}, r"^warm_start\.datasets: no reasoning-gym dataset to draw prompts from"),
        ({"datasets": {}}, r"^warm_start\.datasets: no reasoning-gym dataset to draw prompts from"),
        ({"datasets": 3}, r"^warm_start\.datasets: 3 is not a dataset name, a list of names or a mapping"),
        ({"datasets": {"chain_sum": 3}}, r"^warm_start\.datasets\.chain_sum: 3 is not a mapping"),
    ],
)
def test_bad_options_are_refused(options, message):
    with pytest.raises(ConfigError, match=message):
        warm_start_options(options)


@given(rate=st.floats(0.0, 1.0))
def test_any_format_rate_in_the_unit_interval_is_accepted(rate):
    assert warm_start_options({"format_rate": rate})["format_rate"] == rate


@given(rate=st.floats(allow_nan=False).filter(lambda r: not 0.0 <= r <= 1.0))
def test_any_format_rate_outside_the_unit_interval_is_refused(rate):
    with pytest.raises(ConfigError, match=r"^warm_start\.format_rate: "):
        warm_start_options({"format_rate": rate})


# ---- responses

answers = st.text(st.characters(codec="utf-8", exclude_characters="<>"), min_size=1, max_size=20).filter(str.strip)


@given(answer=answers, seed=st.integers(0, 2**16))
def test_a_strict_response_has_the_strict_format_and_carries_the_answer(answer, seed):
    response = warm_start_response(answer, True, random.Random(seed))
    assert extract_answer(response, strict=True) == answer.strip()
    assert response == warm_start_response(answer, True, random.Random(seed))  # the rng decides, nothing else


@given(answer=answers, seed=st.integers(0, 2**16))
def test_a_free_response_carries_the_answer_without_the_strict_format(answer, seed):
    response = warm_start_response(answer, False, random.Random(seed))
    assert answer in response
    assert extract_answer(response, strict=True) is None
    assert extract_answer(response) in (None, answer.strip())  # some free answers are a bare <answer> block


def test_free_responses_vary_and_include_the_lenient_format():
    rng = random.Random(0)
    responses = {warm_start_response("7", False, rng) for _ in range(200)}
    assert len(responses) > 4 and "7" in responses
    assert "<answer>7</answer>" in responses  # the lenient format, without the think block


# ---- run_warm_start, recorded


class RecordingTokenizer:
    """Characters as ids (offset past the special ids); records the chats it formats."""

    eos_token_id, pad_token_id = 1, 0

    def __init__(self):
        self.chats = []

    def apply_chat_template(self, messages, add_generation_prompt, tokenize):
        assert add_generation_prompt and not tokenize
        self.chats.append(messages)
        return "".join(f"[{m['role']}]{m['content']}" for m in messages) + "[assistant]"

    def __call__(self, text, add_special_tokens):
        assert not add_special_tokens
        return {"input_ids": [ord(c) + 2 for c in text]}

    @staticmethod
    def decode(ids) -> str:
        return "".join(chr(i - 2) for i in ids)


class RecordingModel(torch.nn.Module):
    """Records each training batch; its loss depends on one parameter, so the optimizer has work to do."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(1))
        self.batches = []

    def forward(self, input_ids, attention_mask, labels):
        self.batches.append(
            NS(
                input_ids=input_ids,
                attention_mask=attention_mask,
                labels=labels,
                threads=torch.get_num_threads(),
                training=self.training,
            )
        )
        return NS(loss=(self.weight**2).sum())


@pytest.fixture
def created(monkeypatch) -> list[NS]:
    """Every reasoning-gym dataset the warm start creates: name, seed, size and items."""
    import reasoning_gym

    real, calls = reasoning_gym.create_dataset, []

    def create(name, **kwargs):
        dataset = real(name, **kwargs)
        calls.append(NS(name=name, kwargs=kwargs, items=list(dataset)))
        return dataset

    monkeypatch.setattr(reasoning_gym, "create_dataset", create)
    return calls


def recorded_run(options: dict) -> tuple[RecordingModel, RecordingTokenizer, dict]:
    model, tokenizer = RecordingModel(), RecordingTokenizer()
    losses = run_warm_start(model, tokenizer, options)
    return model, tokenizer, losses


def rows(batch: NS) -> list[tuple[str, str, list[int]]]:
    """(prompt text, response text, response ids) of each row, read off the mask and the labels."""
    out = []
    for ids, mask, labels in zip(
        batch.input_ids.tolist(), batch.attention_mask.tolist(), batch.labels.tolist(), strict=True
    ):
        length = sum(mask)
        assert mask == [1] * length + [0] * (len(ids) - length)  # right padding
        assert ids[length:] == [RecordingTokenizer.pad_token_id] * (len(ids) - length)
        start = next(i for i, label in enumerate(labels) if label != -100)
        assert labels[:start] == [-100] * start and labels[length:] == [-100] * (len(ids) - length)
        assert labels[start:length] == ids[start:length]  # the loss covers the response, and only it
        out.append(
            (
                RecordingTokenizer.decode(ids[:start]),
                RecordingTokenizer.decode(ids[start : length - 1]),
                ids[start:length],
            )
        )
    return out


def test_each_step_trains_on_a_batch_of_prompts_and_responses_ending_in_eos(created):
    options = {"steps": 5, "batch_size": 3, "num_prompts": 4, "datasets": ["chain_sum", "leg_counting"]}
    model, tokenizer, losses = recorded_run(options)
    assert len(model.batches) == 5 and all(b.input_ids.shape[0] == 3 for b in model.batches)
    answers = {item["question"]: str(item["answer"]) for call in created for item in call.items}
    for batch in model.batches:
        questions = []
        for prompt, response, response_ids in rows(batch):
            assert response_ids[-1] == tokenizer.eos_token_id  # the end-of-turn token is learnt
            question = prompt.removeprefix(f"[system]{SYSTEM_PROMPTS['default']}[user]").removesuffix("[assistant]")
            assert answers[question] in response  # each response answers its own prompt
            questions.append(question)
        assert len(set(questions)) == 3  # a batch draws distinct prompts
    # AdamW's first steps move the weight by about the learning rate each: the loss of step 5 is that of 4 steps
    lr = WARM_START_DEFAULTS["lr"]
    assert losses == {"loss_first": 1.0, "loss_last": pytest.approx((1 - 4 * lr) ** 2, rel=1e-3)}


def test_datasets_take_turns_over_the_prompts(created):
    _, tokenizer, _ = recorded_run({"steps": 1, "num_prompts": 5, "datasets": ["chain_sum", "leg_counting"]})
    assert [call.name for call in created] == ["chain_sum", "leg_counting"]
    assert [call.kwargs["size"] for call in created] == [3, 3]  # ceil(5 / 2) each
    questions = [chat[-1]["content"] for chat in tokenizer.chats]
    expected = [created[i % 2].items[i // 2]["question"] for i in range(5)]
    assert questions == expected


def test_dataset_configs_and_the_system_prompt_reach_the_prompts(created):
    options = {
        "steps": 1,
        "num_prompts": 2,
        "datasets": {"chain_sum": {"min_terms": 2, "max_terms": 2}},
        "system_prompt": "Be brief.",
    }
    _, tokenizer, _ = recorded_run(options)
    assert created[0].kwargs["min_terms"] == 2 and created[0].kwargs["max_terms"] == 2
    assert all(chat[0] == {"role": "system", "content": "Be brief."} for chat in tokenizer.chats)


@pytest.mark.parametrize(("rate", "low", "high"), [(0.0, 0.0, 0.0), (1.0, 1.0, 1.0), (0.3, 0.2, 0.4)])
def test_the_share_of_strict_responses_is_the_format_rate(created, rate, low, high):
    model, _, _ = recorded_run({"steps": 50, "batch_size": 4, "num_prompts": 4, "format_rate": rate})
    strict = {}
    for batch in model.batches:
        for prompt, response, _ in rows(batch):
            strict.setdefault(prompt, []).append(extract_answer(response, strict=True) is not None)
    share = sum(map(sum, strict.values())) / sum(map(len, strict.values()))
    assert low <= share <= high
    if 0 < rate < 1:  # a fresh coin per sample: every prompt is seen in both formats
        assert all(any(kinds) and not all(kinds) for kinds in strict.values())


def test_a_seed_gives_the_same_batches_and_another_seed_others(created):
    def batches(seed):
        model, _, _ = recorded_run({"steps": 3, "batch_size": 2, "num_prompts": 6, "seed": seed})
        return [b.input_ids.tolist() for b in model.batches]

    assert batches(3) == batches(3) != batches(4)


@pytest.fixture
def threads():
    """Three torch threads during the test (not one, so that a restored count is seen); the old count after."""
    old = torch.get_num_threads()
    torch.set_num_threads(3)
    yield 3
    torch.set_num_threads(old)


def test_training_runs_on_one_thread_and_restores_the_thread_count(created, threads):
    model, _, _ = recorded_run({"steps": 2, "batch_size": 2, "num_prompts": 2})
    assert [b.threads for b in model.batches] == [1, 1] and all(b.training for b in model.batches)
    assert not model.training  # left in eval mode
    assert torch.get_num_threads() == threads


def test_a_failed_run_restores_the_thread_count_too(created, threads):
    with pytest.raises(ValueError):  # reasoning-gym knows no such dataset
        recorded_run({"steps": 1, "datasets": ["no_such_dataset"]})
    assert torch.get_num_threads() == threads


def test_options_are_checked_before_anything_is_built(created):
    with pytest.raises(ConfigError, match="unknown key"):
        recorded_run({"stpes": 1})
    assert created == []


@pytest.mark.parametrize("seed", [0, 7, MAX_WARM_START_SEED])
def test_warm_start_items_lie_beyond_every_splits_seed_space(created, seed):
    recorded_run({"steps": 1, "num_prompts": 4, "datasets": ["chain_sum", "leg_counting"], "seed": seed})
    # the largest generator seed of any split, for the largest base seed a config may set
    largest_split_seed = MAX_SEED + len(SPLITS) * SPLIT_STRIDE - 1
    for call in created:
        first, last = call.kwargs["seed"], call.kwargs["seed"] + call.kwargs["size"] - 1
        assert largest_split_seed < first and last < 2**32, (call.name, first, last)


# ---- run_warm_start on the real tiny model


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    return tiny.build_tiny_model(tmp_path_factory.mktemp("warm") / "model", hidden_size=32, num_layers=1)


def load(path: Path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)


def test_the_tiny_model_learns_and_a_seed_gives_the_same_weights(tiny_dir):
    options = {"steps": 20, "batch_size": 4, "num_prompts": 8}
    (first, tok), (second, _), (initial, _) = load(tiny_dir), load(tiny_dir), load(tiny_dir)
    losses = run_warm_start(first, tok, options)
    assert run_warm_start(second, tok, options) == losses
    assert all(math.isfinite(v) for v in losses.values()) and losses["loss_last"] < losses["loss_first"] - 1.0
    weights, again, before = first.state_dict(), second.state_dict(), initial.state_dict()
    assert all(torch.equal(weights[name], again[name]) for name in weights)
    assert any(not torch.equal(weights[name], before[name]) for name in weights)
    assert not first.training
