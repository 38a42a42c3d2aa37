"""configs/math/gsm8k_reasoning_rl(_lora) are Reasoning-RL's published GSM8K recipe.

The recipe's numbers are held here as data, as Reasoning-RL's README gives them (its configs/default.yaml,
GRPOConfig example and reward table). The tests compose both configs and check every number against
that data through the keys verl and our reward read, so that a change to a shared layer (grpo_3b,
_qwen_7b, _gsm8k) cannot move the recipe unnoticed.
"""

import functools
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf
from reasoning_gym.utils import SYSTEM_PROMPTS

from rg_verl.data.dataset import ReasoningGymDataset
from rg_verl.reward import compute_score
from rg_verl.reward.terms import TERMS, Response
from tests.unit.test_shipped_configs import CONFIGS, CONFIGS_DIR, composed, config_id

# Reasoning-RL's recipe, as published
RECIPE = {
    "model": "Qwen/Qwen2.5-7B",  # the base model, not Instruct
    "group_size": 8,
    "temperature": 0.7,
    "kl_coef": 0.05,  # beta of beta x KL(pi || pi_ref), a term of the loss
    "clip_range": 0.2,
    "learning_rate": 1e-6,
    "batch_size": 4,
    "num_epochs": 3,
    "eval_samples": 500,  # load_gsm8k("test", max_samples=500)
    # the reward: correctness 1.0 + format 0.1 + self-correction 0.2 - 0.001 per unit of length (read: per token)
    "reward": {"correctness": 1.0, "format": 0.1, "self_correction": 0.2, "length_per_token": -0.001},
}
GSM8K_TRAIN_PROBLEMS = 7473

RECIPE_CONFIGS = [CONFIGS_DIR / "math" / f"gsm8k_reasoning_rl{suffix}.yaml" for suffix in ("", "_lora")]


def recipe_reward(correct: bool, formatted: bool, self_corrected: bool, tokens: int) -> float:
    """Reasoning-RL's reward of a response, from its table."""
    weights = RECIPE["reward"]
    return (
        weights["correctness"] * correct
        + weights["format"] * formatted
        + weights["self_correction"] * self_corrected
        + weights["length_per_token"] * tokens
    )


@functools.cache
def reward_kwargs(path: Path) -> dict:
    """The composed ``reward_kwargs`` of ``path``, resolved (shared: do not change it)."""
    return OmegaConf.to_container(composed(path).reward.custom_reward_function.reward_kwargs, resolve=True)


@pytest.mark.parametrize("path", RECIPE_CONFIGS, ids=config_id)
def test_recipe_config_has_the_published_grpo_hyperparameters(path):
    config = composed(path)
    actor, rollout = config.actor_rollout_ref.actor, config.actor_rollout_ref.rollout
    assert config.actor_rollout_ref.model.path == RECIPE["model"]
    assert config.algorithm.adv_estimator == "grpo" and config.algorithm.norm_adv_by_std_in_grpo
    assert rollout.n == RECIPE["group_size"]
    assert rollout.temperature == pytest.approx(RECIPE["temperature"])
    # beta x KL in the loss: verl's KL loss term, and no KL penalty in the reward
    assert actor.use_kl_loss and actor.kl_loss_coef == pytest.approx(RECIPE["kl_coef"])
    assert not config.algorithm.use_kl_in_reward
    # verl's loss clips with clip_ratio_low / clip_ratio_high, clip_ratio their fallback
    for key in ("clip_ratio", "clip_ratio_low", "clip_ratio_high"):
        assert actor[key] == pytest.approx(RECIPE["clip_range"]), key
    assert actor.entropy_coeff == 0, "the recipe's loss has no entropy bonus"
    assert actor.optim.lr == pytest.approx(RECIPE["learning_rate"])
    # no schedule given: constant, no warm-up
    assert actor.optim.lr_scheduler_type == "constant"
    assert actor.optim.lr_warmup_steps_ratio == 0 and actor.optim.lr_warmup_steps <= 0


@pytest.mark.parametrize("path", RECIPE_CONFIGS, ids=config_id)
def test_recipe_config_runs_three_epochs_of_four_prompts_per_step(path):
    config = composed(path)
    batch = RECIPE["batch_size"]
    assert config.data.train_batch_size == batch and config.actor_rollout_ref.actor.ppo_mini_batch_size == batch
    assert config.reasoning_gym.train_size == GSM8K_TRAIN_PROBLEMS
    assert config.trainer.total_epochs == RECIPE["num_epochs"]
    # verl drops an epoch's last partial batch
    assert config.trainer.total_training_steps == RECIPE["num_epochs"] * (GSM8K_TRAIN_PROBLEMS // batch)
    assert config.reasoning_gym.val_size == RECIPE["eval_samples"]


@pytest.mark.parametrize("path", RECIPE_CONFIGS, ids=config_id)
def test_recipe_reward_weights_are_the_published_ones(path):
    config = composed(path)
    kwargs = reward_kwargs(path)
    terms, budget = kwargs["terms"], config.data.max_response_length
    assert terms["format"] == pytest.approx(RECIPE["reward"]["format"])
    assert terms["self_correction"] == pytest.approx(RECIPE["reward"]["self_correction"])
    others = {name: weight for name, weight in terms.items() if name not in ("format", "self_correction", "length")}
    assert not any(others.values()), f"terms the recipe does not have: {others}"
    # our length term is weight x (-tokens / budget): -0.001 per token is weight 0.001 x budget
    assert terms["length"] == pytest.approx(-RECIPE["reward"]["length_per_token"] * budget)
    assert kwargs["max_response_length"] == budget and kwargs["tokenizer_path"] == RECIPE["model"]


@settings(max_examples=200, deadline=None)
@given(
    correct=st.booleans(),
    formatted=st.booleans(),
    revised_from_wrong=st.booleans(),
    share=st.floats(0.0, 1.0),
)
def test_recipe_terms_add_up_to_the_published_reward(correct, formatted, revised_from_wrong, share):
    """Correctness plus each configured weight x term is Reasoning-RL's reward, for every length in the budget."""
    kwargs = reward_kwargs(RECIPE_CONFIGS[0])
    budget = kwargs["max_response_length"]
    tokens = round(share * budget)
    response = Response(
        text="",
        correctness=float(correct),
        format_ok=formatted,
        num_tokens=tokens,
        max_tokens=budget,
        earlier_answers_correct=(False,) if revised_from_wrong else (),
    )
    ours = response.correctness + sum(weight * TERMS[name](response) for name, weight in kwargs["terms"].items())
    expected = recipe_reward(correct, formatted, correct and revised_from_wrong, tokens)
    assert ours == pytest.approx(expected, abs=1e-9)


@pytest.fixture(scope="module")
def tokenizer_path(tmp_path_factory) -> str:
    from rg_verl.cpu.tiny_model import build_tiny_model

    return str(build_tiny_model(tmp_path_factory.mktemp("tokenizer") / "model"))


def test_recipe_prompt_and_reward_on_a_gsm8k_item(tokenizer_path):
    """A training item of the recipe asks for <think> and <answer>; compute_score with the recipe's reward
    kwargs (the tokenizer swapped for a local one) gives Reasoning-RL's reward of each response."""
    config = composed(RECIPE_CONFIGS[0])
    item = ReasoningGymDataset("reasoning_gym://train", None, config.data)[0]
    assert item["raw_prompt"][0] == {"role": "system", "content": SYSTEM_PROMPTS["DeepSeekZero"]}
    assert item["data_source"] == "math/gsm8k"
    answer = item["reward_model"]["ground_truth"]
    wrong = str(int(answer) + 1)
    responses = {  # response -> (correct, formatted, self-corrected)
        f"<think>step by step</think><answer>{answer}</answer>": (True, True, False),
        f"<think>first {wrong}, then checked</think><answer>{wrong}</answer> wait <answer>{answer}</answer>": (
            True,
            False,
            True,
        ),
        f"<answer>{wrong}</answer>": (False, False, False),
        "no answer at all": (False, False, False),
    }
    kwargs = {**reward_kwargs(RECIPE_CONFIGS[0]), "tokenizer_path": tokenizer_path}
    for text, (correct, formatted, corrected) in responses.items():
        result = compute_score(item["data_source"], text, answer, item["extra_info"], **kwargs)
        assert (result["accuracy"], result["format_ok"], result["self_corrected"]) == (correct, formatted, corrected)
        assert 0 < result["response_tokens"] < kwargs["max_response_length"]
        expected = recipe_reward(correct, formatted, corrected, int(result["response_tokens"]))
        assert result["score"] == pytest.approx(expected), text


def _flat(tree: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


# what the LoRA variant may change: the adapters, and one GPU instead of eight
LORA_KEYS = {
    "actor_rollout_ref.model.lora_rank",
    "actor_rollout_ref.model.lora_alpha",
    "actor_rollout_ref.model.target_modules",
    "actor_rollout_ref.rollout.tensor_model_parallel_size",
    "actor_rollout_ref.rollout.gpu_memory_utilization",
    "actor_rollout_ref.rollout.load_format",
    "actor_rollout_ref.rollout.layered_summon",
    "trainer.n_gpus_per_node",
    "trainer.experiment_name",
}


def test_lora_variant_is_the_recipe_with_adapters_on_one_gpu():
    full, lora = (_flat(OmegaConf.to_container(composed(p), resolve=False)) for p in RECIPE_CONFIGS)
    changed = {key for key in full.keys() | lora.keys() if full.get(key) != lora.get(key)}
    assert changed <= LORA_KEYS, f"the LoRA variant departs from the recipe in {sorted(changed - LORA_KEYS)}"
    assert lora["actor_rollout_ref.model.lora_rank"] > 0 and full["actor_rollout_ref.model.lora_rank"] == 0
    assert lora["trainer.n_gpus_per_node"] == 1


@pytest.mark.parametrize("path", [p for p in CONFIGS if p.parent.name == "math"], ids=config_id)
def test_math_config_header_says_whose_recipe_it_is(path):
    """Each math config's first line says whether it is a published recipe or rg-verl's own setup."""
    first = path.read_text().splitlines()[0]
    if path in RECIPE_CONFIGS:
        assert first.startswith("# Reasoning-RL's published recipe"), first
    else:
        assert first.startswith("# rg-verl's own"), first
