"""The search tests' policy (the suite's tiny model) and prompts."""

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from rg_verl.evaluation.backends.hf import prompt_token_ids


@pytest.fixture(scope="module")
def policy(tiny_model):
    return AutoModelForCausalLM.from_pretrained(tiny_model), AutoTokenizer.from_pretrained(tiny_model)


@pytest.fixture(scope="module")
def prompts(policy):
    _, tokenizer = policy
    questions = ["What is 2+3?", "Sort these words: banana apple cherry", "Count the letters in hello"]
    return [prompt_token_ids(tokenizer, [{"role": "user", "content": q}]) for q in questions]
