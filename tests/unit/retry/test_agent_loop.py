"""The "wrong, try again" agent loop (rg_verl/retry/agent_loop.py) on a scripted stand-in server, without Ray:
the messages each try sees, the response mask, the episode's record and its reward."""

from __future__ import annotations

import asyncio

import pytest
from omegaconf import OmegaConf
from reasoning_gym.factory import create_dataset
from transformers import AutoTokenizer
from verl.experimental.agent_loop.agent_loop import DictConfigWrap
from verl.workers.rollout.replica import TokenOutput

from rg_verl.cpu.tiny_model import build_tiny_model
from rg_verl.retry.agent_loop import RetryAgentLoop
from rg_verl.reward import compute_score

FEEDBACK = "Wrong, try again."
RESPONSE_LENGTH = 200


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    path = build_tiny_model(tmp_path_factory.mktemp("retry") / "model", hidden_size=32, num_layers=1)
    return AutoTokenizer.from_pretrained(path)


@pytest.fixture(scope="module")
def item():
    entry = create_dataset("chain_sum", size=1, seed=3, min_terms=2, max_terms=2, max_digits=1)[0]
    return {
        "raw_prompt": [{"role": "user", "content": entry["question"]}],
        "data_source": "reasoning_gym/chain_sum",
        "reward_model": {"ground_truth": entry["answer"]},
        "extra_info": {"entry": entry},
    }


class ScriptedServer:
    """Answers with the next scripted text; records what each request saw."""

    def __init__(self, tokenizer, texts: list[str]):
        self.tokenizer, self.texts, self.requests = tokenizer, list(texts), []

    async def generate(self, *, request_id, prompt_ids, sampling_params, **_):
        self.requests.append((list(prompt_ids), sampling_params["max_tokens"]))
        ids = self.tokenizer.encode(self.texts[len(self.requests) - 1], add_special_tokens=False)
        ids = [*ids, self.tokenizer.eos_token_id][: sampling_params["max_tokens"]]
        return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids))


def run_episode(tokenizer, item, texts, max_turns=3, data=None):
    config = OmegaConf.create({
        "actor_rollout_ref": {"rollout": {"prompt_length": 512, "response_length": RESPONSE_LENGTH}},
        "reward": {"custom_reward_function": {"reward_kwargs": {"mode": "lenient", "terms": {"format": 0.5}}}},
        "retry": {"max_turns": max_turns, "feedback": FEEDBACK, "discount": 0.5},
        "data": data or {},
    })  # fmt: skip
    server = ScriptedServer(tokenizer, texts)

    async def episode():  # the loop binds to the running event loop, as in verl's agent-loop worker
        loop = RetryAgentLoop(
            trainer_config=DictConfigWrap(config), server_manager=server, tokenizer=tokenizer, processor=None,
            dataset_cls=None, data_config=DictConfigWrap(config.data), hf_model_type="qwen2",
        )  # fmt: skip
        return await loop.run({"temperature": 1.0}, **item)

    return asyncio.run(episode()), server


def answer(value) -> str:
    return f"<think>adding</think><answer>{value}</answer>"


def test_the_runs_chat_template_arguments_shape_every_tries_prompt_ids(tmp_path, item):
    """data.apply_chat_template_kwargs reach the ids the rollout gets: with enable_thinking=false a thinking
    template opens every assistant turn with an empty think block, the first try's and the retry's."""
    path = build_tiny_model(tmp_path / "model", hidden_size=32, num_layers=1, thinking_template=True)
    thinking = AutoTokenizer.from_pretrained(path)
    wrong = answer(int(item["reward_model"]["ground_truth"]) + 1)
    data = {"apply_chat_template_kwargs": {"enable_thinking": False}}
    _, server = run_episode(thinking, item, [wrong, wrong], max_turns=2, data=data)
    (first, _), (second, _) = server.requests
    assert first == thinking.apply_chat_template(item["raw_prompt"], add_generation_prompt=True, tokenize=True,
                                                 return_dict=False, enable_thinking=False)  # fmt: skip
    empty_block = "assistant\n<think>\n\n</think>\n\n"
    assert thinking.decode(first).endswith(empty_block) and thinking.decode(second).endswith(empty_block)
    _, server = run_episode(thinking, item, [wrong, wrong], max_turns=2)  # the template's default: thinking on
    assert not thinking.decode(server.requests[1][0]).endswith(empty_block)
    assert thinking.decode(server.requests[1][0]).endswith("assistant\n<think>\n")


def test_a_wrong_then_right_episode_shows_the_feedback_and_trains_only_the_models_tokens(tokenizer, item):
    wrong, right = answer(int(item["reward_model"]["ground_truth"]) + 1), answer(item["reward_model"]["ground_truth"])
    output, server = run_episode(tokenizer, item, [wrong, right])
    assert len(server.requests) == 2
    (first_prompt, first_budget), (second_prompt, second_budget) = server.requests
    assert output.prompt_ids == first_prompt and first_budget == RESPONSE_LENGTH
    # the second try sees the prompt, the first answer as generated and the feedback turn
    first_ids = tokenizer.encode(wrong, add_special_tokens=False) + [tokenizer.eos_token_id]
    assert second_prompt[: len(first_prompt) + len(first_ids)] == first_prompt + first_ids
    assert FEEDBACK in tokenizer.decode(second_prompt[len(first_prompt) :])
    assert second_budget == RESPONSE_LENGTH - (len(second_prompt) - len(first_prompt))
    # the model's tokens carry loss, the template's and the feedback's do not
    response, mask = output.response_ids, output.response_mask
    assert len(response) == len(mask) == len(output.response_logprobs)
    model_tokens = [t for t, m in zip(response, mask, strict=True) if m == 1]
    second_ids = tokenizer.encode(right, add_special_tokens=False) + [tokenizer.eos_token_id]
    assert model_tokens == first_ids + second_ids
    assert FEEDBACK in tokenizer.decode([t for t, m in zip(response, mask, strict=True) if m == 0])
    assert output.num_turns == 4
    record = output.extra_fields["retry"]
    assert record["turn_accuracy"] == [0.0, 1.0] and record["final_response"] == right
    assert output.extra_fields["turn_scores"] == [0.0, 1.0]


def test_the_reward_scores_the_last_try_discounted_with_the_per_turn_outcomes(tokenizer, item):
    wrong, right = answer(int(item["reward_model"]["ground_truth"]) + 1), answer(item["reward_model"]["ground_truth"])
    output, _ = run_episode(tokenizer, item, [wrong, right])
    # verl's reward manager merges the agent loop's extra fields into extra_info and decodes the whole response
    extra_info = {**item["extra_info"], **output.extra_fields}
    text = tokenizer.decode(output.response_ids, skip_special_tokens=True)
    truth = item["reward_model"]["ground_truth"]
    result = compute_score(item["data_source"], text, truth, extra_info, terms={"format": 0.5})
    assert result["accuracy"] == 1.0
    assert result["score"] == pytest.approx((1.0 + 0.5) * 0.5)  # correctness and format, discounted once
    assert (result["turns"], result["solved_by_turn_1"], result["solved_by_turn_2"], result["solved_by_turn_3"]) == (
        2.0, 0.0, 1.0, 1.0)  # fmt: skip


def test_an_episode_stops_at_max_turns(tokenizer, item):
    wrong = answer(int(item["reward_model"]["ground_truth"]) + 1)
    output, server = run_episode(tokenizer, item, [wrong] * 5, max_turns=3)
    assert len(server.requests) == 3
    assert output.extra_fields["retry"]["turn_accuracy"] == [0.0, 0.0, 0.0]
    assert output.num_turns == 6
    assert tokenizer.decode(output.response_ids).count(FEEDBACK) == 2  # no feedback after the last try


def test_a_right_first_answer_ends_the_episode_after_one_turn(tokenizer, item):
    right = answer(item["reward_model"]["ground_truth"])
    output, server = run_episode(tokenizer, item, [right, right])
    assert len(server.requests) == 1
    assert output.num_turns == 2 and set(output.response_mask) == {1}
    assert output.extra_fields["retry"]["turn_accuracy"] == [1.0]


def test_an_episode_that_fills_the_budget_stops_without_a_feedback_turn(tokenizer, item):
    rambling = "<think>" + "and more " * 200
    output, server = run_episode(tokenizer, item, [rambling, rambling])
    assert len(server.requests) == 1  # the first try used the whole response budget
    assert len(output.response_ids) == RESPONSE_LENGTH and FEEDBACK not in tokenizer.decode(output.response_ids)
