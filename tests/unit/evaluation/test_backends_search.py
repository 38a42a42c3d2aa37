"""Tests of rg_verl.evaluation.backends.search: the value modes of decoding on the tiny model."""

from __future__ import annotations

import json

import pytest

from rg_verl.common.schema import ConfigError
from rg_verl.evaluation.backends import Sampling, create_backend
from rg_verl.evaluation.backends.search import ValueSearchBackend
from rg_verl.evaluation.config import parse_config
from rg_verl.evaluation.runner import ITEMS_FILE, evaluate
from rg_verl.oreo.value_init import prepare_value_model
from rg_verl.search.hf import HFStepExpander
from tests.unit.evaluation.fakes import NUM_ITEMS, small_config

PROMPT = [{"role": "user", "content": "What is 2 + 3? Think step by step."}]


@pytest.fixture(scope="module")
def value_model(tiny_model, tmp_path_factory):
    """A value model of the policy with a random head (a zero head values every state alike)."""
    return prepare_value_model(str(tiny_model), tmp_path_factory.mktemp("value") / "critic", zero_head=False)


def config(tiny_model, value_model, **decoding):
    return parse_config(small_config(
        model_path=str(tiny_model), device="cpu", max_tokens=12, temperature=1.0, eval_repeats=1,
        decoding={"value_model": str(value_model), "seed": 3, **decoding},
    ))  # fmt: skip


@pytest.fixture(scope="module")
def rerank(tiny_model, value_model):
    return create_backend(config(tiny_model, value_model, mode="value_rerank", samples=6))


def test_value_modes_build_the_search_backend(rerank):
    assert isinstance(rerank, ValueSearchBackend) and rerank.value_model is not None


def test_value_rerank_answers_the_samples_best_first_by_value(rerank):
    """The same seeded samples the expander gives, ordered by the value model's score of each."""
    sampling = Sampling(max_tokens=12, temperature=1.0, top_p=1.0, seed=11)
    before = dict(rerank.searched)
    ranked = rerank.generate([PROMPT], 6, sampling)[0]
    assert rerank.searched["continuations"] == before["continuations"] + 6  # what the search made, counted
    assert rerank.searched["tokens"] == before["tokens"] + sum(c.num_tokens for c in ranked)
    ids = [rerank.prompt_ids(PROMPT)]
    expander = HFStepExpander(rerank.model, rerank.tokenizer, [], 12, seed=11, eos_ids=rerank.eos_ids, max_tokens=12)
    samples = [new for new, _ in expander.expand(ids, [(0, ())], 6)[0]]
    values = rerank.scorer.values(ids, [(0, s) for s in samples])
    order = sorted(range(6), key=lambda i: -values[i])
    assert [c.token_ids for c in ranked] == [samples[i] for i in order]
    assert len({c.token_ids for c in ranked}) > 1  # sampled, not copies
    best = rerank.generate([PROMPT], 1, sampling)[0]
    assert best == ranked[:1] and best[0].prompt_token_ids == tuple(ids[0])
    assert best[0].text == rerank.tokenizer.decode(list(best[0].token_ids), skip_special_tokens=True)


def test_value_beam_answers_finish_within_the_budget(tiny_model, value_model):
    backend = create_backend(config(tiny_model, value_model, mode="value_beam", beam_width=2, max_steps=3,
                                    step_max_tokens=4))  # fmt: skip
    sampling = Sampling(max_tokens=12, temperature=1.0, top_p=1.0, seed=2)
    outputs = backend.generate([PROMPT, PROMPT[:1]], 2, sampling)
    assert [len(out) for out in outputs] == [2, 2]
    for out in outputs:
        assert all(1 <= c.num_tokens <= 12 for c in out)  # at most max_steps steps of step_max_tokens, in budget
    assert backend.generate([PROMPT, PROMPT[:1]], 2, sampling) == outputs  # the same seed, the same search


class Interrupted(Exception):
    pass


class StopsAfter:
    """The search backend, interrupted at its ``calls``-th generate call."""

    def __init__(self, inner, calls):
        self.inner, self.calls = inner, calls

    def generate(self, prompts, n, sampling):
        self.calls -= 1
        if self.calls < 0:
            raise Interrupted
        return self.inner.generate(prompts, n, sampling)

    def default_save_every(self, config):
        return 2

    def close(self):
        pass


def test_an_interrupted_value_mode_evaluation_resumes_each_item_once(rerank, tiny_model, value_model, tmp_path):
    run = config(tiny_model, value_model, mode="value_rerank", samples=6)
    run.output_dir, run.save_every = str(tmp_path), 2
    with pytest.raises(Interrupted):
        evaluate(run, backend=StopsAfter(rerank, 2))
    (run_dir,) = [p.parent for p in tmp_path.glob(f"*/{ITEMS_FILE}")]
    assert len((run_dir / ITEMS_FILE).read_text().splitlines()) == 4
    other = config(tiny_model, value_model, mode="value_beam")
    other.output_dir = str(tmp_path)
    with pytest.raises(ConfigError, match="decoding: .* differs from .* in the run being resumed"):
        evaluate(other, resume=True, backend=rerank)
    assert evaluate(run, resume=True, backend=rerank) == run_dir
    keys = [json.loads(line)["key"] for line in (run_dir / ITEMS_FILE).read_text().splitlines()]
    assert len(keys) == len(set(keys)) == NUM_ITEMS
    results = json.loads((run_dir / "results.json").read_text())
    assert results["metadata"]["decoding"]["mode"] == "value_rerank" and results["metrics"]["num_items"] == NUM_ITEMS


def test_the_value_modes_run_on_vllm_with_the_value_model_beside_it(tiny_model, value_model, tmp_path, monkeypatch):
    """``backend: vllm``: the policy in vLLM (here a stand-in run by the tiny model), one ``LLM.generate`` call per
    step over token ids, the value model on the evaluation device; the evaluator writes its results."""
    import sys
    import types

    import torch

    from rg_verl.common.vllm_engine import ENGINE_KWARGS
    from rg_verl.evaluation.backends.hf import prompt_token_ids
    from rg_verl.evaluation.backends.search import VLLM_MEMORY_SHARE, VLLMValueSearchBackend
    from tests import fake_vllm

    monkeypatch.setitem(sys.modules, "vllm", fake_vllm.module())
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # vLLM on the CPU
    run = config(tiny_model, value_model, mode="value_beam", beam_width=2, max_steps=3, step_max_tokens=4)
    run.backend, run.output_dir = "vllm", str(tmp_path)
    backend = create_backend(run)
    assert isinstance(backend, VLLMValueSearchBackend) and str(backend.value_model.device) == "cpu"
    (llm,) = fake_vllm.LLM.instances
    assert llm.kwargs == ENGINE_KWARGS  # vLLM's CPU settings on the CPU, without engine_kwargs in the config
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # on a GPU:
    gpu = types.SimpleNamespace(device="cuda", engine_kwargs={})
    assert backend.engine_kwargs(gpu) == {"gpu_memory_utilization": VLLM_MEMORY_SHARE}  # room for the value model
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert backend.prompt_ids(PROMPT) == prompt_token_ids(llm.get_tokenizer(), PROMPT)  # the training prompt's ids
    run_dir = evaluate(run, backend=backend)
    steps = len(llm.calls)
    assert 1 <= steps <= 3 * -(-NUM_ITEMS // run.batch_size)  # at most max_steps calls per search
    for _, params in llm.calls:
        assert all(p.n == 2 and p.max_tokens <= 4 and p.seed is not None for p in params)
    results = json.loads((run_dir / "results.json").read_text())
    assert results["metrics"]["num_items"] == NUM_ITEMS and results["metadata"]["decoding"]["mode"] == "value_beam"
    assert backend.searched["continuations"] == 2 * sum(len(params) for _, params in llm.calls)
    run.engine_kwargs = {"gpu_memory_utilization": 0.3}
    create_backend(run)
    assert fake_vllm.LLM.instances[-1].kwargs == {**ENGINE_KWARGS, "gpu_memory_utilization": 0.3}  # the config's wins


def test_a_value_mode_on_a_server_is_refused_before_any_model_loads(tiny_model, value_model):
    with pytest.raises(ConfigError, match="backend: 'openai'; decoding mode value_beam .* set backend: hf or vllm"):
        parse_config(small_config(
            model_path=str(tiny_model), backend="openai", base_url="http://127.0.0.1:1/v1", served_model_name="m",
            decoding={"mode": "value_beam", "value_model": str(value_model)},
        ))  # fmt: skip
