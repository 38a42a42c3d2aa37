"""rg_verl.evaluation.context: the longest prompt with max_tokens must fit the model's context, before any model
loads. The tiny model (2048 positions) stands for the model; its prompts are counted here as vLLM counts them."""

import logging

import pytest
from reasoning_gym.utils import SYSTEM_PROMPTS
from transformers import AutoTokenizer

from rg_verl.common.schema import ConfigError
from rg_verl.evaluation import runner
from rg_verl.evaluation.config import parse_config
from rg_verl.evaluation.context import check_context
from rg_verl.evaluation.items import eval_datasets
from tests.unit.evaluation.fakes import FakeOpenAI, small_config

POSITIONS = 2048  # the tiny model's max_position_embeddings


@pytest.fixture(scope="module")
def longest(tiny_model):
    """(tokens, entry field, item key) of small_config's longest prompt: the chat template rendered to text, then
    tokenized without special tokens, as vLLM's LLM.chat does it."""
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    config = parse_config(small_config())
    found = []
    for (i, j), dataset in zip([(0, 0), (0, 1), (1, 0)], eval_datasets(config), strict=True):
        for index in range(len(dataset)):
            question = dataset[index]["extra_info"]["entry"]["question"]
            messages = [{"role": "system", "content": SYSTEM_PROMPTS["default"]}, {"role": "user", "content": question}]
            text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            tokens = len(tokenizer.encode(text, add_special_tokens=False))
            found.append((tokens, f"categories[{i}].datasets[{j}]", dataset.item_key(index)))
    return max(found, key=lambda entry: entry[0])  # the first of the longest


def config_of(tiny_model, **fields):
    config = parse_config(small_config(model_path=str(tiny_model), **fields))
    return config, eval_datasets(config)


def refusal(config, datasets) -> str:
    with pytest.raises(ConfigError) as error:
        check_context(config, datasets)
    return str(error.value)


def test_max_tokens_and_the_longest_prompt_beyond_the_models_positions_are_refused(tiny_model, longest):
    tokens, field, key = longest
    budget = POSITIONS - tokens
    assert refusal(*config_of(tiny_model, max_tokens=budget + 1)) == (
        f"max_tokens: {budget + 1} + the longest prompt, {tokens} tokens ({field}, item {key}), = {POSITIONS + 1} "
        f"tokens, more than the model's context of {POSITIONS} (max_position_embeddings {POSITIONS} in "
        f"{tiny_model / 'config.json'}); lower max_tokens to at most {budget}, or evaluate a model with a longer "
        "context"
    )
    check_context(*config_of(tiny_model, max_tokens=budget))


def test_vllms_max_model_len_wins_where_it_is_smaller(tiny_model, longest):
    tokens, field, _ = longest
    engine = {"max_model_len": tokens + 10}
    message = refusal(*config_of(tiny_model, backend="vllm", engine_kwargs=engine, max_tokens=11))
    assert f"more than the model's context of {tokens + 10} (engine_kwargs.max_model_len {tokens + 10}); " in message
    check_context(*config_of(tiny_model, backend="vllm", engine_kwargs=engine, max_tokens=10))
    check_context(*config_of(tiny_model, backend="vllm", engine_kwargs={"max_model_len": 10**6}, max_tokens=10))
    message = refusal(*config_of(tiny_model, backend="vllm", engine_kwargs={"max_model_len": tokens}, max_tokens=1))
    assert message.startswith(f"max_tokens: 1 + the longest prompt, {tokens} tokens ({field}, ")
    assert message.endswith("leave that dataset out (its prompt alone fills it), or evaluate a model with a longer "
                            "context")  # fmt: skip


def test_an_openai_server_is_asked_for_the_served_models_context(tiny_model, longest):
    tokens = longest[0]
    models = [{"id": "other", "max_model_len": 8}, {"id": "served", "max_model_len": tokens + 5}]
    with FakeOpenAI(lambda messages, body: "", models=models) as fake:
        fields = {"backend": "openai", "base_url": fake.url, "served_model_name": "served"}
        message = refusal(*config_of(tiny_model, max_tokens=6, **fields))
        check_context(*config_of(tiny_model, max_tokens=5, **fields))
    assert f"more than the model's context of {tokens + 5} (max_model_len that {fake.url}/models reports for " \
           "served); lower max_tokens to at most 5" in message  # fmt: skip
    assert fake.requests == []  # a GET of the listing only; no completion was asked for


@pytest.mark.parametrize("models", [None, [{"id": "served"}]], ids=["no listing", "no max_model_len"])
def test_a_server_that_reports_no_context_is_not_checked_and_says_so(tiny_model, models, caplog):
    with FakeOpenAI(lambda messages, body: "", models=models) as fake, caplog.at_level(logging.INFO):
        check_context(*config_of(tiny_model, max_tokens=10**6, backend="openai", base_url=fake.url,
                                 served_model_name="served"))  # fmt: skip
    assert "prompt lengths are not checked" in caplog.text


def test_a_served_model_without_a_local_tokenizer_is_not_checked(caplog):
    """No tokenizer here: no count would be exact, so the server is not even asked."""
    with FakeOpenAI(lambda messages, body: "", models=[{"id": "served", "max_model_len": 1}]) as fake:
        config = parse_config(small_config(model_path="served", backend="openai", base_url=fake.url,
                                           max_tokens=10**6))  # fmt: skip
        with caplog.at_level(logging.DEBUG, logger="rg_verl.evaluation.context"):
            check_context(config, eval_datasets(config))
    assert "'served' is no local folder, so its tokenizer is not here; prompt lengths are not checked" in caplog.text


def test_the_run_refuses_before_its_folder_or_any_backend_is_made(tiny_model, tmp_path, monkeypatch):
    def no_backend(config):
        raise AssertionError("a backend was built")

    monkeypatch.setattr(runner, "create_backend", no_backend)
    config, _ = config_of(tiny_model, max_tokens=POSITIONS, output_dir=str(tmp_path / "results"))
    with pytest.raises(ConfigError, match=r"^max_tokens: 2048 \+ the longest prompt"):
        runner.evaluate(config)
    assert not (tmp_path / "results").exists()
