"""The vLLM step expander of the value-guided search, on a stand-in ``vllm`` run by the tiny model."""

import sys

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForTokenClassification, AutoTokenizer

from rg_verl.oreo.value_init import prepare_value_model
from rg_verl.search.beam import value_beam
from rg_verl.search.hf import HFStepExpander, HFValueScorer
from rg_verl.search.steps import delimiter_token_ids
from rg_verl.search.vllm import VLLMStepExpander, state_seed
from tests import fake_vllm
from tests.unit.search.test_hf import DELIMITERS, check_step, random_requests


@pytest.fixture
def llm(tiny_model, monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", fake_vllm.module())
    return fake_vllm.LLM(str(tiny_model))


def expander(llm, policy, **options):
    model, tokenizer = policy
    defaults = dict(step_max_tokens=5, max_tokens=8, eos_ids=[tokenizer.eos_token_id],
                    delimiter_ids=delimiter_token_ids(tokenizer, DELIMITERS))  # fmt: skip
    return VLLMStepExpander(llm, **{**defaults, **options})


def test_one_generate_call_per_step_over_token_ids_with_the_step_rule(llm, policy, prompts):
    vllm_expander = expander(llm, policy, seed=4)
    requests = random_requests(prompts, 5, seed=2) + [(0, tuple(range(400, 408)))]  # the last has no budget left
    out = vllm_expander.bind(prompts)(requests, 3)
    assert len(llm.calls) == 1  # every live request in one call; the spent one generates nothing
    sent, params = llm.calls[0]
    assert [s["prompt_token_ids"] for s in sent] == [list(prompts[p]) + list(state) for p, state in requests[:-1]]
    stops = sorted(vllm_expander.delimiter_ids | vllm_expander.eos_ids)
    for (p, state), param in zip(requests, params, strict=False):
        assert param.n == 3 and param.max_tokens == min(5, 8 - len(state)) and param.stop_token_ids == stops
        assert param.seed == state_seed(4, prompts[p], state)
    assert out[-1] == [((), True)] * 3
    for (_, state), continuations in zip(requests[:-1], out[:-1], strict=True):
        for new, finished in continuations:
            check_step(vllm_expander, state, new, finished)
    assert vllm_expander.continuations == 15 and vllm_expander.tokens == sum(len(n) for r in out for n, _ in r)


def test_batched_seeded_expansion_equals_one_beam_at_a_time(llm, policy, prompts):
    requests = random_requests(prompts, 6, seed=1)
    batched = expander(llm, policy, seed=7).expand(prompts, requests, 3)
    alone = [expander(llm, policy, seed=7).expand(prompts, [request], 3)[0] for request in requests]
    assert batched == alone
    assert batched != expander(llm, policy, seed=8).expand(prompts, requests, 3)
    assert len({new for row in batched for new, _ in row}) > 1  # sampled, not copies


@pytest.fixture(scope="module")
def random_model(tiny_model, tmp_path_factory):
    """A seeded random model of the tiny model's shape and tokenizer: its greedy text varies (the tiny model's
    greedy text repeats one token)."""
    config = AutoConfig.from_pretrained(tiny_model)
    config.initializer_range = 0.5
    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("random") / "model"
    AutoModelForCausalLM.from_config(config).save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_model).save_pretrained(out)
    return out


def test_greedy_search_on_vllm_equals_the_search_on_transformers(random_model, prompts, monkeypatch, tmp_path):
    """Both backends move in the same steps: the greedy value_beam answers agree token for token."""
    monkeypatch.setitem(sys.modules, "vllm", fake_vllm.module())
    llm = fake_vllm.LLM(str(random_model))
    model, tokenizer = AutoModelForCausalLM.from_pretrained(random_model), llm.get_tokenizer()
    critic = AutoModelForTokenClassification.from_pretrained(
        prepare_value_model(str(random_model), tmp_path / "critic", zero_head=False)
    )
    eos = [tokenizer.eos_token_id]
    scorer = HFValueScorer(critic, eos_ids=eos, pad_id=tokenizer.pad_token_id or 0)
    hf = HFStepExpander(model, tokenizer, DELIMITERS, step_max_tokens=4, temperature=0, eos_ids=eos, max_tokens=12)
    on_vllm = expander(llm, (model, tokenizer), step_max_tokens=4, temperature=0, max_tokens=12, eos_ids=eos)
    answers = [value_beam(prompts, e.bind(prompts), scorer.bind(prompts), beam_width=2, max_steps=5, n_answers=2)
               for e in (hf, on_vllm)]  # fmt: skip
    assert answers[0] == answers[1]
    assert all(params.n == 1 for _, call in llm.calls for params in call)  # greedy: one continuation, copied
    beams = [beam for row in answers[0] for beam in row]
    assert len({beam.ids for beam in beams}) > 1  # the answers differ
    assert any(len(beam.ids) > len(hf._cut(beam.ids, 12, 0)[0]) for beam in beams)  # longer than their first step
