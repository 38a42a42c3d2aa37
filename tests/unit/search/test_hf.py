"""The transformers expander and value scorer of the value-guided search, on the tiny model."""

import random

import pytest
import torch
from transformers import AutoModelForTokenClassification

from rg_verl.oreo.batches import step_starts, unbind_responses
from rg_verl.oreo.value_init import prepare_value_model
from rg_verl.search.beam import value_beam, value_rerank
from rg_verl.search.hf import HFStepExpander, HFValueScorer, PromptCache, delimiter_token_ids

DELIMITERS = ["\n", " "]  # " " ends many of the tiny model's steps


@pytest.fixture(scope="module")
def critic(tiny_model, tmp_path_factory):
    out = prepare_value_model(str(tiny_model), tmp_path_factory.mktemp("search") / "critic", zero_head=False)
    return AutoModelForTokenClassification.from_pretrained(out)


def random_requests(prompts, count, seed=0, longest=6):
    rng = random.Random(seed)
    return [
        (i % len(prompts), tuple(rng.randrange(300, 1000) for _ in range(rng.randrange(longest + 1))))
        for i in range(count)
    ]


def check_step(expander, state, new, finished):
    """A step ends right after its delimiter token, at end of sequence, or at its budget, and nowhere before."""
    budget = min(expander.step_max_tokens, expander.max_tokens - len(state))
    assert 1 <= len(new) <= budget
    assert not any(t in expander.eos_ids or t in expander.delimiter_ids for t in new[:-1])
    at_eos = new[-1] in expander.eos_ids
    assert at_eos or new[-1] in expander.delimiter_ids or len(new) == budget
    assert finished == (at_eos or len(state) + len(new) == expander.max_tokens)


def test_delimiter_tokens_are_the_training_step_ends(policy):
    _, tokenizer = policy
    ids = delimiter_token_ids(tokenizer, DELIMITERS)
    every = list(range(len(tokenizer)))
    starts = step_starts(every + [every[0]], tokenizer, DELIMITERS)  # token i ends a step iff i + 1 starts one
    assert ids == {i for i in every if starts[i + 1] == 1.0}
    assert 0 < len(ids) < len(every)
    with pytest.raises(ValueError, match="delimiters"):
        delimiter_token_ids(tokenizer, ["\n", ""])
    assert delimiter_token_ids(tokenizer, []) == frozenset()  # whole responses: no step ends


def test_given_delimiter_ids_replace_the_vocabulary_scan_and_the_expander_counts_its_work(policy, prompts):
    model, tokenizer = policy
    ids = delimiter_token_ids(tokenizer, DELIMITERS)
    scanned = HFStepExpander(model, tokenizer, DELIMITERS, step_max_tokens=5, seed=3, max_tokens=8)
    given = HFStepExpander(model, tokenizer, DELIMITERS, step_max_tokens=5, seed=3, max_tokens=8, delimiter_ids=ids)
    requests = random_requests(prompts, 4, seed=2)
    out = scanned.expand(prompts, requests, 2)
    assert given.delimiter_ids == scanned.delimiter_ids and given.expand(prompts, requests, 2) == out
    assert scanned.continuations == 8 and scanned.tokens == sum(len(new) for row in out for new, _ in row)


def test_batched_greedy_expansion_equals_one_request_at_a_time(policy, prompts):
    model, tokenizer = policy
    expander = HFStepExpander(model, tokenizer, DELIMITERS, step_max_tokens=6, temperature=0, max_tokens=9)
    requests = random_requests(prompts, 8)
    batched = expander.expand(prompts, requests, 2)
    assert batched == [expander.expand(prompts, [request], 2)[0] for request in requests]
    for (_, state), continuations in zip(requests, batched, strict=True):
        assert continuations[0] == continuations[1]  # greedy: copies
        check_step(expander, state, *continuations[0])
    ends = {len(new) < 6 for row in batched for new, _ in row}
    assert ends == {True, False}  # some stop at a delimiter, some run to their budget


def test_the_prompt_cache_changes_no_greedy_step(policy, prompts):
    """A row on the prompts' cache (the cached block left-padded to the longest prompt, then the tail) generates
    what the whole row generates alone, without a cache or padding."""
    model, tokenizer = policy
    expander = HFStepExpander(model, tokenizer, DELIMITERS, step_max_tokens=6, temperature=0)
    assert len({len(p) for p in prompts}) > 1  # the shorter prompts' blocks are padded
    for p, state in random_requests(prompts, 6, seed=3):
        (new, _), _ = expander.expand(prompts, [(p, state)], 2)[0]
        ids = torch.tensor([list(prompts[p]) + list(state)])
        with torch.inference_mode():
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, do_sample=False,
                                 pad_token_id=expander.pad_id, eos_token_id=sorted(expander.eos_ids))  # fmt: skip
        assert new == expander._cut(out[0, ids.shape[1] :].tolist(), 6, len(state))[0]


def test_rows_on_the_prompt_cache_give_the_whole_rows_logits(policy, prompts):
    """The next-token logits of rows built on the cache (each row its own prompt's block, padded in the middle,
    positions over real tokens) equal those of each whole row alone."""
    model, _ = policy
    cache = PromptCache(model, prompts, pad_id=0)
    requests = random_requests(prompts, 6, seed=5)
    ids, mask, past = cache.rows(requests)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, cache.width :]
    with torch.inference_mode():
        logits = model(input_ids=ids[:, cache.width :], attention_mask=mask, position_ids=positions,
                       past_key_values=past).logits[:, -1]  # fmt: skip
        for row, (p, state) in enumerate(requests):
            alone = model(input_ids=torch.tensor([list(prompts[p]) + list(state)])).logits[0, -1]
            assert torch.allclose(logits[row], alone, atol=1e-4), (p, state)


def test_seeded_sampling_repeats_and_its_steps_end_at_delimiters(policy, prompts):
    model, tokenizer = policy

    def expander(seed):
        return HFStepExpander(model, tokenizer, DELIMITERS, step_max_tokens=5, seed=seed, max_tokens=8)

    requests = random_requests(prompts, 6, seed=1)
    first, again = expander(7), expander(7)
    calls = [first.expand(prompts, requests, 3) for _ in range(2)]
    assert calls == [again.expand(prompts, requests, 3) for _ in range(2)]
    assert calls[0] != calls[1]  # the seed moves on from call to call
    assert calls[0] != expander(8).expand(prompts, requests, 3)
    for (_, state), continuations in zip(requests, calls[0], strict=True):
        for new, finished in continuations:
            check_step(first, state, new, finished)
    steps = [new for row in calls[0] for new, _ in row]
    assert any(new[-1] in first.delimiter_ids for new in steps)
    assert len(set(steps)) > 1


def test_end_of_sequence_finishes_and_a_spent_budget_generates_nothing(policy, prompts):
    model, tokenizer = policy
    greedy = HFStepExpander(model, tokenizer, [], step_max_tokens=3, temperature=0)
    first_token = greedy.expand(prompts, [(0, ())], 1)[0][0][0][0]
    ending = HFStepExpander(model, tokenizer, [], step_max_tokens=3, temperature=0, eos_ids=[first_token])
    assert ending.expand(prompts, [(0, ())], 2) == [[((first_token,), True)] * 2]

    budgeted = HFStepExpander(model, tokenizer, [], step_max_tokens=3, temperature=0, max_tokens=4)
    [[(new, finished)], [spent]] = budgeted.expand(prompts, [(1, (500, 501)), (1, (500, 501, 502, 503))], 1)
    assert len(new) == 2 and finished
    assert spent == ((), True)


def test_expander_argument_errors(policy):
    model, tokenizer = policy
    with pytest.raises(ValueError, match="step_max_tokens"):
        HFStepExpander(model, tokenizer, DELIMITERS, step_max_tokens=0)
    with pytest.raises(ValueError, match="max_tokens"):
        HFStepExpander(model, tokenizer, DELIMITERS, step_max_tokens=2, max_tokens=0)
    with pytest.raises(ValueError, match="top_p"):
        HFStepExpander(model, tokenizer, DELIMITERS, step_max_tokens=2, top_p=0)


def direct_value(critic, prompt, state, eos_ids):
    """V read from an unpadded forward of prompt + state: at its last token, or before a final EOS."""
    with torch.no_grad():
        logits = critic(torch.tensor([list(prompt) + list(state)])).logits[0, :, 0]
    position = len(prompt) + len(state) - (2 if state and state[-1] in eos_ids else 1)
    return logits[position].item()


def test_values_are_read_where_the_trained_state_ends_padding_or_not(critic, prompts, policy):
    _, tokenizer = policy
    eos = tokenizer.eos_token_id
    scorer = HFValueScorer(critic, eos_ids=[eos])
    requests = random_requests(prompts, 7, seed=2, longest=12) + [(0, ()), (1, (400, 401, eos)), (2, (eos,))]
    values = scorer.values(prompts, requests)
    expected = [direct_value(critic, prompts[p], state, {eos}) for p, state in requests]
    torch.testing.assert_close(torch.tensor(values), torch.tensor(expected), rtol=0, atol=1e-5)
    torch.testing.assert_close(
        torch.tensor(scorer.values(prompts, requests[::-1])[::-1]), torch.tensor(values), rtol=0, atol=1e-5
    )
    # an EOS-ended state has the value of the state before its last token
    assert values[-2] == pytest.approx(scorer.values(prompts, [(1, (400, 401))])[0], abs=1e-5)
    assert len(set(values)) > 3  # the kept random head gives distinct values


def test_values_match_the_training_alignment(critic, prompts):
    """V(s_t) in training sits at response column t (``unbind_responses``): the scorer's value of the first t
    response tokens."""
    scorer = HFValueScorer(critic, eos_ids=[])
    response = (610, 788, 666, 397, 401)
    with torch.no_grad():
        row = critic(torch.tensor([list(prompts[1]) + list(response)])).logits[:, :, 0]
    [trained] = unbind_responses(row, [len(response)])
    ours = scorer.values(prompts, [(1, response[:t]) for t in range(len(response))])
    torch.testing.assert_close(torch.tensor(ours), trained, rtol=0, atol=1e-5)


def test_scorer_refuses_a_model_with_more_labels(tiny_model):
    model = AutoModelForTokenClassification.from_pretrained(tiny_model, num_labels=2)
    with pytest.raises(ValueError, match="value_model: 2 labels"):
        HFValueScorer(model)


def test_value_beam_on_the_tiny_model(policy, critic, prompts):
    model, tokenizer = policy
    expander = HFStepExpander(model, tokenizer, DELIMITERS, step_max_tokens=4, seed=0, max_tokens=10)
    scorer = HFValueScorer(critic, eos_ids=expander.eos_ids)
    answers = value_beam(prompts, expander.bind(prompts), scorer.bind(prompts), beam_width=2, max_steps=3, n_answers=2)
    assert [len(a) for a in answers] == [2] * len(prompts)
    for p, beams in enumerate(answers):
        assert all(1 <= len(beam.ids) <= 10 for beam in beams)
        assert [b.finished for b in beams] == sorted((b.finished for b in beams), reverse=True)  # finished first
        for part in ([b for b in beams if b.finished], [b for b in beams if not b.finished]):
            assert [b.value for b in part] == sorted((b.value for b in part), reverse=True)
        rescored = scorer.values(prompts, [(p, beam.ids) for beam in beams])
        assert rescored == pytest.approx([beam.value for beam in beams], abs=1e-5)

    whole = HFStepExpander(model, tokenizer, [], step_max_tokens=6, seed=0, max_tokens=6)
    best = value_rerank(prompts, whole.bind(prompts), scorer.bind(prompts), k=4, n_answers=1)
    assert all(len(b) == 1 and b[0].finished and len(b[0].ids) <= 6 for b in best)
