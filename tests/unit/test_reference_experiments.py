"""The shipped experiments against reasoning-gym's own, key by key, modulo the differences docs/experiments.md lists.

The reference is reasoning-gym at commit 49b0713: its ``training/configs/**`` (14 training configs) and
``training/evaluations/**`` (evaluation YAMLs), read by ``training/train_grpo.py`` and
``training/trainers/ray_grpo_trainer.py`` on verl commit c342069 (training/README.md). Its values are written
out below as data, under verl 0.9.1's key names (a renamed key or value is noted where it is written), with the
defaults of verl c342069's ``ppo_trainer.yaml`` where a reference file is silent. A shipped experiment's composed
config must hold the reference's value at every key, unless the key is in :data:`ALLOWED` (training) or
:data:`EVAL_ALLOWED` (evaluation), each entry with its reason and the experiments it applies to; both dicts must
name exactly the keys of docs/experiments.md's tables, and every entry must still be needed.

Experiments the reference does not ship (:data:`OURS`) are held to the reference experiment of their family.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf

from rg_verl.common.names import TERM_NAMES
from rg_verl.config import validate
from rg_verl.data.curriculum import MixState
from rg_verl.evaluation.config import load_config
from tests.helpers import REPO
from tests.unit.test_shipped_configs import CONFIGS_DIR, composed

REFERENCE_COMMIT = "49b0713"  # reasoning-gym's commit the data below is read from
DOCS = REPO / "docs" / "experiments.md"
EVAL_DIR = REPO / "evaluation" / "configs"
KW = "reward.custom_reward_function.reward_kwargs"
MISSING = object()  # a key the reference file does not set (evaluation files only)

# ---- the reference's training configs -----------------------------------------------------------------------

# what every one of the 14 reference training configs sets alike (or leaves to verl c342069's defaults)
SHARED: dict[str, Any] = {
    # reasoning_gym.developer_prompt
    "reasoning_gym.system_prompt": "DeepSeekZero",
    # train_grpo.py: the training composite's seed (validation's: 2)
    "reasoning_gym.seed": 1,
    # train_grpo.py validates on the training mix, at its starting level for a curriculum
    "reasoning_gym.val_datasets": {},
    # ray_grpo_trainer.py scores reasoning_gym.utils.extract_answer's last <answer> block
    f"{KW}.mode": "lenient",
    # reward.py's defaults: the trainer passes only a secondary reward's kwargs, and no config sets these two
    f"{KW}.reference_terms.max_output_length": 1024,
    f"{KW}.reference_terms.preappend_thinking_token": False,
    "data.train_batch_size": 32,
    "actor_rollout_ref.hybrid_engine": True,
    "actor_rollout_ref.model.enable_gradient_checkpointing": True,
    "actor_rollout_ref.model.use_remove_padding": True,
    "actor_rollout_ref.model.external_lib": None,
    "actor_rollout_ref.actor.strategy": "fsdp",
    "actor_rollout_ref.actor.use_dynamic_bsz": False,
    "actor_rollout_ref.actor.grad_clip": 1.0,
    "actor_rollout_ref.actor.clip_ratio": 0.2,
    "actor_rollout_ref.actor.entropy_coeff": 0.001,
    "actor_rollout_ref.actor.use_kl_loss": True,
    "actor_rollout_ref.actor.kl_loss_coef": 0.001,
    "actor_rollout_ref.actor.kl_loss_type": "low_var_kl",
    "actor_rollout_ref.actor.ppo_epochs": 1,
    "actor_rollout_ref.actor.shuffle": False,
    "actor_rollout_ref.actor.ulysses_sequence_parallel_size": 1,
    "actor_rollout_ref.actor.use_torch_compile": True,  # c342069's default
    "actor_rollout_ref.actor.optim.lr": 1e-6,
    "actor_rollout_ref.actor.optim.lr_warmup_steps": -1,  # c342069's default
    "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio": 0.0,
    "actor_rollout_ref.actor.optim.lr_scheduler_type": "constant",  # c342069: warmup_style
    "actor_rollout_ref.actor.optim.min_lr_ratio": 0.0,  # c342069: null; read by the cosine schedule only
    "actor_rollout_ref.actor.optim.weight_decay": 0.01,  # c342069's AdamW default (fsdp_workers.py)
    "actor_rollout_ref.actor.optim.betas": [0.9, 0.999],  # c342069's AdamW default
    "actor_rollout_ref.actor.fsdp_config.param_offload": False,
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload": False,
    "actor_rollout_ref.actor.fsdp_config.fsdp_size": -1,
    "actor_rollout_ref.actor.fsdp_config.wrap_policy.min_num_params": 0,
    "actor_rollout_ref.ref.fsdp_config.param_offload": True,
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": 160,
    "actor_rollout_ref.ref.log_prob_use_dynamic_bsz": False,  # ${actor_rollout_ref.actor.use_dynamic_bsz}
    "actor_rollout_ref.ref.ulysses_sequence_parallel_size": 1,
    "actor_rollout_ref.rollout.name": "vllm",
    "actor_rollout_ref.rollout.n": 8,
    "actor_rollout_ref.rollout.temperature": 1.0,
    "actor_rollout_ref.rollout.top_k": -1,
    "actor_rollout_ref.rollout.top_p": 1.0,
    "actor_rollout_ref.rollout.do_sample": True,
    "actor_rollout_ref.rollout.dtype": "bfloat16",
    "actor_rollout_ref.rollout.gpu_memory_utilization": 0.7,
    "actor_rollout_ref.rollout.ignore_eos": False,
    "actor_rollout_ref.rollout.enforce_eager": True,
    "actor_rollout_ref.rollout.free_cache_engine": True,
    "actor_rollout_ref.rollout.load_format": "dummy",  # c342069: dummy_dtensor
    "actor_rollout_ref.rollout.tensor_model_parallel_size": 4,
    "actor_rollout_ref.rollout.max_num_batched_tokens": 12288,
    "actor_rollout_ref.rollout.max_model_len": 12288,
    "actor_rollout_ref.rollout.max_num_seqs": 1024,
    "actor_rollout_ref.rollout.enable_chunked_prefill": True,
    "actor_rollout_ref.rollout.disable_log_stats": True,
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": 160,
    "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz": False,  # ${actor_rollout_ref.actor.use_dynamic_bsz}
    # validation: do_sample with c342069's val_kwargs defaults, temperature 0 (greedy) and one response
    "actor_rollout_ref.rollout.val_kwargs.do_sample": True,
    "actor_rollout_ref.rollout.val_kwargs.temperature": 0,
    "actor_rollout_ref.rollout.val_kwargs.top_p": 1.0,
    "actor_rollout_ref.rollout.val_kwargs.top_k": -1,
    "actor_rollout_ref.rollout.val_kwargs.n": 1,
    "algorithm.adv_estimator": "grpo",
    "algorithm.norm_adv_by_std_in_grpo": True,  # c342069's GRPO divides by the group's standard deviation
    "algorithm.gamma": 1.0,
    "algorithm.lam": 1.0,
    "algorithm.kl_penalty": "kl",
    "algorithm.kl_ctrl.type": "fixed",
    "algorithm.kl_ctrl.kl_coef": 0.001,
    # ray_grpo_trainer.py puts a KL penalty in the reward only without the KL loss
    "algorithm.use_kl_in_reward": False,
    "trainer.balance_batch": True,
    "trainer.total_epochs": 1,
    "trainer.logger": ["console", "wandb"],
    "trainer.log_val_generations": 0,  # c342069: val_generations_to_log_to_wandb
    "trainer.nnodes": 1,
    "trainer.n_gpus_per_node": 4,
    "trainer.test_freq": 100,
    "trainer.resume_mode": "auto",
    "trainer.resume_from_path": None,  # c342069: False
    "trainer.critic_warmup": 0,
    "trainer.default_hdfs_dir": None,
    "trainer.del_local_ckpt_after_load": False,
    "trainer.max_actor_ckpt_to_keep": None,  # c342069: remove_previous_ckpt_in_save false, every checkpoint kept
    "trainer.val_before_train": True,  # ray_grpo_trainer.py validates first unless told not to
}


def terms(**weights: float) -> dict[str, float]:
    """The reference's secondary rewards as our term weights: every other term of ours off."""
    return {name: weights.get(name, 0.0) for name in TERM_NAMES}


def reference(path: str, values: dict[str, Any]) -> dict[str, Any]:
    """One reference training config: its file, :data:`SHARED`, and what it sets on its own."""
    return {"file": f"training/configs/{path}", **SHARED, **values}


def no_curriculum() -> dict[str, Any]:
    # a disabled curriculum section is never read (train_grpo.py, ray_grpo_trainer.py)
    return {"reasoning_gym.curriculum.enabled": False}


def intra(name: str, datasets: dict) -> dict[str, Any]:
    """The intra-domain experiments: 512 / 1024 tokens, cosine 0.3 + format 0.2, micro-batches of 4."""
    return reference(
        f"intra_generalisation/{name}_qwen_3b.yaml",
        {
            "actor_rollout_ref.model.path": "Qwen/Qwen2.5-3B-Instruct",
            "reasoning_gym.datasets": datasets,
            "reasoning_gym.train_size": 20000,  # dataset_size
            "reasoning_gym.val_size": 20000,  # the validation composite has dataset_size items too
            **no_curriculum(),
            f"{KW}.terms": terms(reference_cosine=0.3, reference_format=0.2),
            "data.max_prompt_length": 512,
            "data.max_response_length": 1024,
            "actor_rollout_ref.actor.ppo_mini_batch_size": 16,
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 4,
            "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": 12288,
            "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu": 12288,
            "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu": 12288,
            "trainer.total_training_steps": 500,
            "trainer.save_freq": 100,
        },
    )


def inter(name: str, datasets: dict, weights: dict[str, float]) -> dict[str, Any]:
    """The inter-domain experiments: 4096 / 2048 tokens, micro-batches of 8."""
    return reference(
        f"inter_generalisation/{name}_qwen_3b.yaml",
        {
            "actor_rollout_ref.model.path": "Qwen/Qwen2.5-3B-Instruct",
            "reasoning_gym.datasets": datasets,
            "reasoning_gym.train_size": 20000,
            "reasoning_gym.val_size": 20000,
            **no_curriculum(),
            f"{KW}.terms": terms(**weights),
            "data.max_prompt_length": 4096,
            "data.max_response_length": 2048,
            "actor_rollout_ref.actor.ppo_mini_batch_size": 16,
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 8,
            "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": 49152,
            "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu": 49152,
            "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu": 49152,
            "trainer.total_training_steps": 500,
            "trainer.save_freq": 100,
        },
    )


def equal(*names: str) -> dict:
    return {name: {"weight": 1.0, "config": {}} for name in names}


# knights_knaves at KnightsKnavesCurriculum's level 0 (n_people 0, depth 0, width 0), as CurriculumExperiment
# builds the training mix of knights_knaves_curriculum.yaml (whose reasoning_gym.datasets is empty)
KK_LEVEL_0 = {
    "knights_knaves": {"weight": 1.0, "config": {"n_people": 2, "depth_constraint": 2, "width_constraint": 2}}
}
KK_HARDEST = {
    "knights_knaves": {"weight": 1.0, "config": {"n_people": 5, "depth_constraint": 3, "width_constraint": 3}}
}


def knights_knaves(path: str, values: dict[str, Any]) -> dict[str, Any]:
    """The two knights-and-knaves runs: 4096 / 2048 tokens, format 0.2, mini-batches of 8, 300 steps."""
    return reference(
        f"curriculum/{path}",
        {
            "actor_rollout_ref.model.path": "Qwen/Qwen2.5-3B-Instruct",
            "reasoning_gym.train_size": 20000,
            "reasoning_gym.val_size": 20000,
            f"{KW}.terms": terms(reference_format=0.2),
            "data.max_prompt_length": 4096,
            "data.max_response_length": 2048,
            "actor_rollout_ref.actor.ppo_mini_batch_size": 8,
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 2,
            "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": 34816,
            "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu": 34816,
            "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu": 34816,
            "trainer.total_training_steps": 300,
            "trainer.save_freq": 100,
            **values,
        },
    )


REFERENCE: dict[str, dict[str, Any]] = {
    "intra_generalisation/algebra_qwen_3b": intra(
        "algebra",
        {
            "simple_equations": {
                "weight": 0.5,
                "config": {"min_terms": 2, "max_terms": 4, "min_value": 1, "max_value": 100},
            },
            "polynomial_multiplication": {
                "weight": 0.5,
                "config": {
                    **{"min_terms": 2, "max_terms": 4, "min_value": 1, "max_value": 100, "min_degree": 0},
                    **{"max_degree": 3, "min_polynomials": 2, "max_polynomials": 3},
                },
            },
        },
    ),
    "intra_generalisation/algorithmic_qwen_3b": intra(
        "algorithmic",
        {
            "spell_backward": {"weight": 0.33, "config": {"min_word_len": 3, "max_word_len": 10}},
            "letter_jumble": {
                "weight": 0.34,
                "config": {"min_word_len": 1, "max_word_len": 50, "min_words": 3, "max_words": 40},
            },
            "word_sorting": {
                "weight": 0.33,
                "config": {"min_words": 3, "max_words": 10, "min_word_length": 3, "max_word_length": 12},
            },
        },
    ),
    "intra_generalisation/arithmetic_qwen_3b": intra(
        "arithmetic",
        {
            "fraction_simplification": {
                "weight": 0.33,
                "config": {"min_value": 1, "max_value": 1000, "min_factor": 1, "max_factor": 100},
            },
            "gcd": {"weight": 0.34, "config": {"min_numbers": 2, "max_numbers": 2, "min_value": 1, "max_value": 1000}},
            "lcm": {"weight": 0.33, "config": {"min_numbers": 2, "max_numbers": 2, "min_value": 1, "max_value": 100}},
        },
    ),
    "intra_generalisation/cognition_qwen_3b": intra(
        "cognition",
        {
            "rubiks_cube": {"weight": 0.33, "config": {"min_scramble_steps": 3, "max_scramble_steps": 10}},
            "figlet_font": {"weight": 0.34, "config": {"min_word_len": 3, "max_word_len": 7}},
            "rectangle_count": {"weight": 0.33, "config": {"max_rectangles": 10, "width": 80, "height": 80}},
        },
    ),
    "intra_generalisation/games_qwen_3b": intra(
        "games",
        {
            "mini_sudoku": {"weight": 0.33, "config": {"min_empty": 8, "max_empty": 12}},
            "futoshiki": {
                "weight": 0.34,
                "config": {"min_board_size": 4, "max_board_size": 9, "min_difficulty": 0, "max_difficulty": 3},
            },
            "sokoban": {
                "weight": 0.33,
                "config": {"min_w": 6, "min_h": 6, "max_w": 10, "max_h": 10, "min_boxes": 4, "max_boxes": 10,
                           "max_depth": 80},  # fmt: skip
            },
        },
    ),
    "intra_generalisation/graphs_qwen_3b": intra(
        "graphs",
        {
            "shortest_path": {
                "weight": 0.33,
                "config": {"min_rows": 5, "max_rows": 8, "min_cols": 5, "max_cols": 8, "p_blocked": 0.4},
            },
            "largest_island": {
                "weight": 0.34,
                "config": {
                    **{"min_rows": 5, "max_rows": 10, "min_cols": 5, "max_cols": 10, "min_num_islands": 0},
                    **{"max_num_islands": 5, "min_island_size": 0, "max_island_size": 10},
                },
            },
            "quantum_lock": {"weight": 0.33, "config": {"difficulty": 10}},
        },
    ),
    "inter_generalisation/algebra_qwen_3b": inter(
        "algebra",
        equal(
            "complex_arithmetic", "intermediate_integration", "polynomial_equations", "polynomial_multiplication",
            "simple_equations", "simple_integration",
        ),  # fmt: skip
        {"reference_format": 0.2, "reference_length": 0.2},
    ),
    "inter_generalisation/algorithmic_qwen_3b": inter(
        "algorithmic",
        {
            **equal("ab", "base_conversion", "cryptarithm"),
            "binary_alternation": {"weight": 1.0, "config": {"p_solvable": 0.9}},
            "binary_matrix": {"weight": 1.0, "config": {"min_n": 2, "max_n": 6}},
            "caesar_cipher": {"weight": 1.0, "config": {"max_words": 10}},
            "isomorphic_strings": {"weight": 1.0, "config": {"max_string_length": 8}},
            "jugs": {"weight": 1.0, "config": {"difficulty": 6}},
            "rotate_matrix": {"weight": 1.0, "config": {"min_n": 2, "max_n": 6}},
            "string_manipulation": {"weight": 1.0, "config": {"max_string_length": 15, "max_num_rules": 6}},
        },
        {"reference_format": 0.2, "reference_length": 0.2},
    ),
    "inter_generalisation/games_qwen_3b": inter(
        "games",
        equal(
            "futoshiki", "knight_swap", "mahjong_puzzle", "maze", "mini_sudoku", "n_queens", "rush_hour", "sokoban",
            "sudoku", "tsumego",
        ),  # fmt: skip
        {"reference_format": 0.2},  # the only inter-domain config without the length reward
    ),
    "inter_generalisation/logic_qwen_3b": inter(
        "logic",
        equal(
            "aiw", "circuit_logic", "knights_knaves", "propositional_logic", "self_reference", "syllogism",
            "zebra_puzzles",
        ),  # fmt: skip
        {"reference_format": 0.2, "reference_length": 0.2},
    ),
    "external_benchmarks/rg_math_llama_3b": reference(
        "external_benchmarks/maths_llama_3b.yaml",
        {
            "actor_rollout_ref.model.path": "meta-llama/Llama-3.2-3B-Instruct",
            "reasoning_gym.datasets": equal(
                "complex_arithmetic", "intermediate_integration", "polynomial_equations", "polynomial_multiplication",
                "simple_geometry", "bitwise_arithmetic", "chain_sum", "decimal_arithmetic", "decimal_chain_sum",
            ),  # fmt: skip
            "reasoning_gym.train_size": 40000,
            "reasoning_gym.val_size": 40000,
            **no_curriculum(),
            f"{KW}.terms": terms(reference_cosine=0.3, reference_format=0.2),
            "data.max_prompt_length": 512,
            "data.max_response_length": 1024,
            "actor_rollout_ref.actor.ppo_mini_batch_size": 16,
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 4,
            "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": 12288,
            "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu": 12288,
            "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu": 12288,
            # one epoch of 40,000 / 32 = 1,250 steps ends the run before these
            "trainer.total_training_steps": 2000,
            "trainer.save_freq": 200,
        },
    ),
    "curriculum/knights_knaves_curriculum": knights_knaves(
        "knights_knaves_curriculum.yaml",
        {
            "reasoning_gym.datasets": KK_LEVEL_0,
            "reasoning_gym.curriculum.enabled": True,
            "reasoning_gym.curriculum.levels": {
                "knights_knaves": {"n_people": 0, "depth_constraint": 0, "width_constraint": 0}
            },
            "reasoning_gym.curriculum.last_k": 2560,
            # ray_grpo_trainer.py decides only once the score board's window holds last_k samples
            "reasoning_gym.curriculum.min_samples": 2560,
            "reasoning_gym.curriculum.success_threshold": 0.7,
            "reasoning_gym.curriculum.failure_threshold": 0.3,
            # schedule.automatic: false, so schedule.update_steps (30) is never read
            "reasoning_gym.curriculum.schedule_every": 0,
        },
    ),
    "curriculum/knights_knaves_no_curriculum": knights_knaves(
        "knights_knaves_noncurriculum.yaml", {"reasoning_gym.datasets": KK_HARDEST, **no_curriculum()}
    ),
    "curriculum/spell_backward_curriculum": reference(
        "curriculum/spell_backward.yaml",
        {
            "actor_rollout_ref.model.path": "Qwen/Qwen2.5-3B-Instruct",
            # SpellBackwardCurriculum's level 0 (word_len 3 to 3)
            "reasoning_gym.datasets": {
                "spell_backward": {"weight": 1.0, "config": {"min_word_len": 3, "max_word_len": 3}}
            },
            "reasoning_gym.train_size": 20000,
            "reasoning_gym.val_size": 20000,
            "reasoning_gym.curriculum.enabled": True,
            "reasoning_gym.curriculum.levels": {"spell_backward": {"word_len": 0}},
            "reasoning_gym.curriculum.last_k": 20,
            "reasoning_gym.curriculum.min_samples": 20,
            "reasoning_gym.curriculum.success_threshold": 0.7,
            "reasoning_gym.curriculum.failure_threshold": 0.1,
            "reasoning_gym.curriculum.schedule_every": 0,
            f"{KW}.terms": terms(reference_cosine=0.3, reference_format=0.2),
            "data.max_prompt_length": 512,
            "data.max_response_length": 1024,
            "actor_rollout_ref.actor.ppo_mini_batch_size": 16,
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 4,
            "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": 12288,
            "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu": 12288,
            "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu": 12288,
            "trainer.total_training_steps": 400,
            "trainer.save_freq": 100,
        },
    ),
}

# the experiments the reference does not ship -> the reference experiment of their family they follow
NEW_CATEGORIES = [f"inter_generalisation/{c}_qwen_3b" for c in ("arc", "arithmetic", "cognition", "geometry", "graphs")]
THINKING = "inter_generalisation/algorithmic_qwen3_4b"
RETRY = "inter_generalisation/algorithmic_qwen_3b_retry"
OURS = {
    RETRY: "inter_generalisation/algorithmic_qwen_3b",
    **{name: "inter_generalisation/algebra_qwen_3b" for name in NEW_CATEGORIES},
    "external_benchmarks/rg_math_qwen_3b": "external_benchmarks/rg_math_llama_3b",
    THINKING: "inter_generalisation/algorithmic_qwen_3b",
}

# what verl 0.9.1 no longer has, of what the reference sets: key -> what became of it
REMOVED = {
    "verbose": "read by neither the reference's training code nor verl",
    "actor_rollout_ref.rollout.use_fire_sampling": "FIRE sampling (false in the reference) is gone from verl",
    "trainer.val_generations_to_log_to_wandb": "renamed trainer.log_val_generations",
    "trainer.remove_previous_ckpt_in_save": "replaced by trainer.max_actor_ckpt_to_keep (null: keep every one)",
}


@dataclass(frozen=True)
class Difference:
    """A deliberate difference from the reference: why, and where (None: every experiment it differs in)."""

    reason: str
    scope: frozenset[str] | None = None


def only(*ids: str) -> frozenset[str]:
    return frozenset(ids)


INTRA = [f"intra_generalisation/{c}_qwen_3b" for c in ("algebra", "algorithmic", "arithmetic", "cognition",
                                                       "games", "graphs")]  # fmt: skip
MICRO_BATCHES = (
    "verl 0.9.1 packs micro-batches by token count (use_dynamic_bsz); the mini-batches, so the policy "
    "updates, are the reference's, and no fixed micro-batch size has to fit the longest response"
)
ENGINE = "vLLM engine throughput and memory settings: how fast responses come, not which"

# training: key -> the deliberate difference (docs/experiments.md, "Training configs")
ALLOWED: dict[str, Difference] = {
    "reasoning_gym.seed": Difference(
        "held-out rule: each split draws from its own seed space of one base seed, and keeps a question only in "
        "its hash share; the reference drew training from seed 1 and validation from seed 2"
    ),
    "reasoning_gym.val_size": Difference(
        "the reference validated on dataset_size items (20,000 or 40,000 greedy responses every 100 steps); ours "
        "on reasoning_gym.val_size"
    ),
    "reasoning_gym.val_datasets": Difference(
        "validation measures what the experiment studies: the held-out datasets (intra-domain), the hardest "
        "level (knights and knaves), every word length (spell_backward)",
        only(*INTRA, "curriculum/knights_knaves_curriculum", "curriculum/spell_backward_curriculum"),
    ),
    "reasoning_gym.datasets": Difference(
        "ours: an inter-domain category the reference does not train on",
        only(*NEW_CATEGORIES),
    ),
    "actor_rollout_ref.model.path": Difference(
        "ours: the reference's Llama experiment for Qwen2.5-3B-Instruct; a thinking model, Qwen3-4B-Thinking-2507, "
        "on the algorithmic experiment",
        only("external_benchmarks/rg_math_qwen_3b", THINKING),
    ),
    "data.max_response_length": Difference(
        "ours: a thinking model reasons at length before its answer; an episode's three tries share one budget",
        only(THINKING, RETRY),
    ),
    "data.max_prompt_length": Difference(
        "prompts over the reference's budget: cognition's rectangle_count and figlet_font (the reference's "
        "dataset raises on them), arc's grids",
        only("intra_generalisation/cognition_qwen_3b", "inter_generalisation/arc_qwen_3b"),
    ),
    **{
        f"actor_rollout_ref.{key}": Difference(MICRO_BATCHES)
        for key in (
            "actor.use_dynamic_bsz",
            "actor.ppo_micro_batch_size_per_gpu",
            "actor.ppo_max_token_len_per_gpu",
            "ref.log_prob_micro_batch_size_per_gpu",
            "ref.log_prob_use_dynamic_bsz",
            "ref.log_prob_max_token_len_per_gpu",
            "rollout.log_prob_micro_batch_size_per_gpu",
            "rollout.log_prob_use_dynamic_bsz",
            "rollout.log_prob_max_token_len_per_gpu",
        )
    },
    "actor_rollout_ref.rollout.tensor_model_parallel_size": Difference(
        "two vLLM engines of 2 GPUs instead of one of 4: a 3B model fits in 2, and two engines generate faster"
    ),
    **{
        f"actor_rollout_ref.rollout.{key}": Difference(ENGINE)
        for key in ("enforce_eager", "max_num_batched_tokens", "max_model_len", "max_num_seqs")
    },
    **{
        f"actor_rollout_ref.rollout.val_kwargs.{key}": Difference(
            "validation samples as the experiment's evaluation configs do (val_sampling=evaluator), so in-training "
            "val-core and evaluate_model.py agree; the reference validated greedily, one response per item"
        )
        for key in ("temperature", "top_p", "n")
    },
}

# ---- the reference's evaluation configs -----------------------------------------------------------------------

# the settings of training/evaluations/inter_generalisation/*.yaml (model_path: each file names a local checkpoint)
INTER_SETTINGS = {
    "max_tokens": 2048,
    "top_p": 0.9,
    "temperature": 0.6,
    "developer_prompt": "DeepSeekZero",
    "developer_role": "system",
    "output_dir": "results",
    "save_metadata": True,
    "save_full_results": True,
    "eval_repeats": 3,
    # evaluate_model.py: create_dataset(name, seed=seed, size=size, **params), in order
    "items": "reference",
}
INTRA_SETTINGS = {**INTER_SETTINGS, "max_tokens": 1024}


def evaluation(path: str, model: str, settings: dict, category: str, entries: list[tuple]) -> dict[str, Any]:
    """One reference evaluation file: its settings and its (category, dataset, size, seed, params) entries."""
    rows = [(category, name, 100, 42, params) for name, params in entries]
    return {"file": f"training/evaluations/{path}", "model_path": model, **settings, "entries": rows}


def plain(*names: str) -> list[tuple]:
    return [(name, {}) for name in names]


REFERENCE_EVALS: dict[str, dict[str, Any]] = {
    **{
        f"curriculum/{name}": evaluation(
            "curriculum/knights_knaves.yaml",
            "Qwen/Qwen2.5-3B-Instruct",
            {**INTER_SETTINGS, "temperature": 1.0, "top_p": 1.0, "dtype": "bfloat16"},
            "logic",
            [("knights_knaves", {"n_people": 4, "depth_constraint": 3, "width_constraint": 3})],
        )
        for name in ("knights_knaves_curriculum", "knights_knaves_no_curriculum")
    },
    "inter_generalisation/algebra": evaluation(
        "inter_generalisation/algebra.yaml", "../models/inter_games_qwen_3b_500", INTER_SETTINGS, "algebra",
        plain("complex_arithmetic", "intermediate_integration", "polynomial_equations", "polynomial_multiplication",
              "simple_equations", "simple_integration"),
    ),  # fmt: skip
    "inter_generalisation/algorithmic": evaluation(
        "inter_generalisation/algorithmic.yaml", "../models/inter_logic_qwen_3b_400", INTER_SETTINGS, "algorithmic",
        [*plain("ab", "base_conversion"), ("binary_alternation", {"p_solvable": 0.9}),
         ("binary_matrix", {"min_n": 2, "max_n": 6}), ("caesar_cipher", {"max_words": 10}), *plain("cryptarithm"),
         ("isomorphic_strings", {"max_string_length": 8}), ("jugs", {"difficulty": 6}),
         ("rotate_matrix", {"min_n": 2, "max_n": 6}),
         ("string_manipulation", {"max_string_length": 15, "max_num_rules": 6})],
    ),  # fmt: skip
    "inter_generalisation/arc": evaluation(
        "inter_generalisation/arc.yaml", "../models/inter_games_qwen_3b_500", INTER_SETTINGS, "arc",
        plain("arc_1d", "arc_agi", "rearc"),
    ),  # fmt: skip
    "inter_generalisation/arithmetic": evaluation(
        "inter_generalisation/arithmetic.yaml", "../models/inter_algebra_qwen_3b_500", INTER_SETTINGS, "arithmetic",
        plain("basic_arithmetic", "bitwise_arithmetic", "calendar_arithmetic", "chain_sum", "count_bits",
              "decimal_arithmetic", "decimal_chain_sum", "dice", "fraction_simplification", "gcd", "lcm",
              "power_function", "prime_factorization", "products", "time_intervals"),
    ),  # fmt: skip
    "inter_generalisation/cognition": evaluation(
        "inter_generalisation/cognition.yaml", "../models/inter_games_qwen_3b_500", INTER_SETTINGS, "cognition",
        plain("color_cube_rotation", "figlet_font", "modulo_grid", "needle_haystack", "number_sequence",
              "rectangle_count", "rubiks_cube"),
    ),  # fmt: skip
    "inter_generalisation/games": evaluation(
        "inter_generalisation/games.yaml", "../models/inter_logic_qwen_3b_400", INTER_SETTINGS, "games",
        plain("knight_swap", "mahjong_puzzle", "maze", "mini_sudoku", "n_queens", "rush_hour", "sokoban", "tsumego"),
    ),  # fmt: skip
    "inter_generalisation/geometry": evaluation(
        "inter_generalisation/geometry.yaml", "../models/inter_games_qwen_3b_500", INTER_SETTINGS, "geometry",
        plain("advanced_geometry", "simple_geometry"),
    ),  # fmt: skip
    "inter_generalisation/graphs": evaluation(
        "inter_generalisation/graphs.yaml", "../models/inter_games_qwen_3b_500", INTER_SETTINGS, "graphs",
        plain("course_schedule", "family_relationships", "largest_island", "quantum_lock", "shortest_path"),
    ),  # fmt: skip
    "intra_generalisation/algebra": evaluation(
        "intra-generalisation/eval_algebraic_composite.yaml", "../utils/qwen3b_algebraic", INTRA_SETTINGS,
        "reasoning",
        [("simple_integration", {"min_terms": 2, "max_terms": 5, "min_degree": 1, "max_degree": 10,
                                 "min_bounds": 1, "max_bounds": 10})],
    ),  # fmt: skip
    "intra_generalisation/algorithmic": evaluation(
        "intra-generalisation/eval_algorithmic_composite.yaml", "../utils/qwen3b_algorithmic_500", INTRA_SETTINGS,
        "reasoning",
        [("number_sorting", {"min_numbers": 3, "max_numbers": 10, "min_decimals": 0, "max_decimals": 2,
                             "min_value": -100.0, "max_value": 100.0})],
    ),  # fmt: skip
    "intra_generalisation/arithmetic": evaluation(
        "intra-generalisation/eval_arithmetic_composite.yaml", "../utils/qwen_3b_arithmetic_100", INTRA_SETTINGS,
        "reasoning", [("prime_factorization", {"min_value": 2, "max_value": 1000})],
    ),  # fmt: skip
    "intra_generalisation/cognition": evaluation(
        "intra-generalisation/eval_cognition_composite.yaml", "../utils/qwen3b_cognition", INTRA_SETTINGS,
        "reasoning",
        [("number_sequence", {"min_terms": 4, "max_terms": 8, "min_value": -100, "max_value": 100,
                              "max_complexity": 3}),
         ("modulo_grid", {"size_x": 20, "size_y": 20, "max_divisor": 20, "max_target": 20, "max_holes": 1})],
    ),  # fmt: skip
    "intra_generalisation/games": evaluation(
        "intra-generalisation/eval_games_composite.yaml", "../utils/games", {**INTRA_SETTINGS, "max_tokens": 2048},
        "reasoning", [("tower_of_hanoi", {"min_disks": 3, "max_disks": 4, "min_pegs": 3, "max_pegs": 4})],
    ),  # fmt: skip
}

# the evaluation files the reference does not ship -> the reference file whose settings they follow
EVAL_OURS = {
    "curriculum/spell_backward_curriculum": "curriculum/knights_knaves_curriculum",
    "external_benchmarks/rg_math_llama_3b": "inter_generalisation/algebra",
    "external_benchmarks/rg_math_qwen_3b": "inter_generalisation/algebra",
    "inter_generalisation/logic": "inter_generalisation/algebra",
    "inter_generalisation/algorithmic_retry": "inter_generalisation/algorithmic",
    "intra_generalisation/graphs": "intra_generalisation/algebra",
}
KK_EVALS = ("curriculum/knights_knaves_curriculum", "curriculum/knights_knaves_no_curriculum")
INTRA_EVALS = [f"intra_generalisation/{c}" for c in ("algebra", "algorithmic", "arithmetic", "cognition", "games")]

# evaluation: key -> the deliberate difference (docs/experiments.md, "Evaluation configs")
EVAL_ALLOWED: dict[str, Difference] = {
    "items": Difference(
        "held-out rule: items come from the evaluation split, whose questions no training run can see; "
        "items: reference evaluates the reference's own items"
    ),
    "model_path": Difference(
        "the reference's files name its own local checkpoints; ours the base model, --model-path a checkpoint",
        # the knights-and-knaves file names the base model, as ours do; spell_backward's follows it
        only(*(set(REFERENCE_EVALS) | set(EVAL_OURS)) - {*KK_EVALS, "curriculum/spell_backward_curriculum"}),
    ),
    "max_tokens": Difference(
        "ours: the response budget of the experiment's training config (1,024 tokens)",
        only("curriculum/spell_backward_curriculum", "external_benchmarks/rg_math_llama_3b",
             "external_benchmarks/rg_math_qwen_3b"),
    ),  # fmt: skip
    "datasets": Difference(
        "ours: the intra-domain files also evaluate the other held-out datasets and the trained ones; the files "
        "the reference does not ship evaluate their experiment's datasets",
        only(*INTRA_EVALS, *EVAL_OURS),
    ),
    "category": Difference(
        "the reference's intra-domain files label their one category reasoning; ours held_out, next to "
        "other_held_out and trained",
        only(*INTRA_EVALS),
    ),
}

# ---- comparing ----------------------------------------------------------------------------------------------


def _mix(value: Any) -> dict:
    """A mix as {name: {weight, config}}, so that a spec's omitted config compares as empty."""
    return {
        name: {"weight": float((spec or {}).get("weight", 1.0)), "config": dict((spec or {}).get("config") or {})}
        for name, spec in (value or {}).items()
    }


def ours(config, key: str) -> Any:
    value = OmegaConf.select(config, key)
    value = OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
    return _mix(value) if key in ("reasoning_gym.datasets", "reasoning_gym.val_datasets") else value


def same(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, int | float) and isinstance(b, int | float) and a == pytest.approx(b)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b


def experiment_id(path: Path) -> str:
    return str(path.relative_to(CONFIGS_DIR).with_suffix(""))


def training_differences(experiment: str) -> dict[str, tuple[Any, Any]]:
    """key -> (the reference's value, ours) for every key where the experiment's composed config differs."""
    expected = REFERENCE[OURS.get(experiment, experiment)]
    config = composed(CONFIGS_DIR / f"{experiment}.yaml")
    return {
        key: (value, ours(config, key))
        for key, value in expected.items()
        if key != "file" and not same(value, ours(config, key))
    }


SHIPPED = sorted(
    experiment_id(p)
    for folder in ("curriculum", "external_benchmarks", "inter_generalisation", "intra_generalisation")
    for p in (CONFIGS_DIR / folder).glob("*.yaml")
    if not p.name.startswith("_")
)


def test_every_shipped_experiment_has_its_reference():
    assert set(SHIPPED) == set(REFERENCE) | set(OURS), "a new experiment needs its reference values here"
    assert set(OURS.values()) <= set(REFERENCE)
    assert len({values["file"] for values in REFERENCE.values()}) == 14, "the reference ships 14 training configs"


def unexplained(differences: dict[str, tuple[Any, Any]], allowed: dict, name: str) -> dict[str, str]:
    """The differences of config ``name`` that no allowed difference explains."""
    return {
        key: f"reference {theirs!r}, ours {mine!r}"
        for key, (theirs, mine) in differences.items()
        if key not in allowed or (allowed[key].scope is not None and name not in allowed[key].scope)
    }


def check_every_allowance_is_needed(names, differences_of, allowed: dict) -> None:
    """Every allowed difference still occurs, and exactly in the configs its scope names."""
    differs: dict[str, set[str]] = {}
    for name in names:
        for key in differences_of(name):
            differs.setdefault(key, set()).add(name)
    for key, difference in allowed.items():
        assert key in differs, f"{key}: no config differs from the reference here any more; drop it"
        if difference.scope is not None:
            assert differs[key] == difference.scope, f"{key}: differs in {sorted(differs[key])}"


@pytest.mark.parametrize("experiment", SHIPPED)
def test_experiment_matches_the_reference_but_for_the_documented_differences(experiment):
    left = unexplained(training_differences(experiment), ALLOWED, experiment)
    file = REFERENCE[OURS.get(experiment, experiment)]["file"]
    assert not left, f"{experiment} differs from reasoning-gym {REFERENCE_COMMIT} {file}: {left}"


def test_every_allowed_difference_is_still_needed_where_it_is_allowed():
    check_every_allowance_is_needed(SHIPPED, training_differences, ALLOWED)


@pytest.mark.parametrize("experiment", SHIPPED)
def test_settings_verl_no_longer_has_are_not_in_the_composed_config(experiment):
    config = composed(CONFIGS_DIR / f"{experiment}.yaml")
    for key in REMOVED:
        parent, _, leaf = key.rpartition(".")
        node = OmegaConf.select(config, parent) if parent else config
        assert node is not None and leaf not in node, f"{key} is in the config; docs/experiments.md says otherwise"


# ---- the curriculum rule, as the reference's trainer applies it ---------------------------------------------------


def mix_state(experiment: str) -> MixState:
    settings = validate(composed(CONFIGS_DIR / f"{experiment}.yaml"))
    return MixState(settings.mix("train"), settings.curriculum, settings.adaptive_weights)


def test_knights_knaves_curriculum_decides_once_2560_samples_at_a_level_are_in():
    """A step brings 32 prompts x 8 responses; the reference decides after 10 such steps at a level."""
    state = mix_state("curriculum/knights_knaves_curriculum")
    step = [1.0] * 32 * 8
    for _ in range(9):
        assert state.update({"knights_knaves": step}) == []
    assert state.update({"knights_knaves": step}) == ["knights_knaves"]
    assert state.levels("knights_knaves") == {"n_people": 1, "depth_constraint": 1, "width_constraint": 1}
    # the window starts afresh at the new level: 10 more steps before the next decision, here a fall (< 0.3)
    for _ in range(9):
        assert state.update({"knights_knaves": [0.0] * 256}) == []
    assert state.update({"knights_knaves": [0.0] * 256}) == ["knights_knaves"]
    assert state.levels("knights_knaves") == {"n_people": 0, "depth_constraint": 0, "width_constraint": 0}


def test_spell_backward_curriculum_decides_after_every_step_on_its_last_20_samples():
    state = mix_state("curriculum/spell_backward_curriculum")
    # 236 failures, then 20 successes: the last 20 decide
    assert state.update({"spell_backward": [0.0] * 236 + [1.0] * 20}) == ["spell_backward"]
    assert state.levels("spell_backward") == {"word_len": 1}
    # a middling window (0.5) keeps the level
    assert state.update({"spell_backward": [0.0, 1.0] * 128}) == []


def test_a_level_moves_only_past_a_threshold_as_the_reference_does():
    """The reference compares with > and <: a success rate equal to a threshold keeps the level and the window."""
    state = mix_state("curriculum/spell_backward_curriculum")
    assert state.update({"spell_backward": [0.0] * 6 + [1.0] * 14}) == []  # exactly 0.7: no decision
    assert len(state.results["spell_backward"]) == 20
    assert state.update({"spell_backward": [1.0]}) == ["spell_backward"]  # 15 of the last 20: past 0.7


# ---- evaluation configs -----------------------------------------------------------------------------------------


def eval_id(path: Path) -> str:
    return str(path.relative_to(EVAL_DIR).with_suffix(""))


SHIPPED_EVALS = sorted(
    eval_id(p)
    for folder in ("curriculum", "external_benchmarks", "inter_generalisation", "intra_generalisation")
    for p in (EVAL_DIR / folder).glob("*.yaml")
)


def evaluation_differences(name: str) -> dict[str, tuple[Any, Any]]:
    """key -> (the reference's value, ours) where the shipped evaluation config differs from its reference."""
    expected = REFERENCE_EVALS[EVAL_OURS.get(name, name)]
    config = load_config(EVAL_DIR / f"{name}.yaml")
    differences = {
        key: (value, getattr(config, key))
        for key, value in expected.items()
        if key not in ("file", "entries") and not same(value, getattr(config, key))
    }
    rows = {
        (entry.dataset, entry.size, entry.seed, repr(sorted(entry.params.items()))): category.category
        for category in config.categories
        for entry in category.datasets
    }
    theirs = {(name_, size, seed, repr(sorted(params.items()))): label for label, name_, size, seed, params in
              expected["entries"]}  # fmt: skip
    if name in EVAL_OURS:  # its own datasets: compared as one difference
        differences["datasets"] = (sorted(theirs), sorted(rows))
        return differences
    missing = sorted(set(theirs) - set(rows))
    assert not missing, f"{name}: the reference's entries {missing} are not evaluated"
    if set(rows) - set(theirs):
        differences["datasets"] = (sorted(theirs), sorted(rows))
    labels = {row: (label, rows[row]) for row, label in theirs.items() if rows[row] != label}
    if labels:
        differences["category"] = tuple(zip(*labels.values(), strict=True))
    return differences


def test_every_shipped_evaluation_has_its_reference():
    assert set(SHIPPED_EVALS) == set(REFERENCE_EVALS) | set(EVAL_OURS)
    assert set(EVAL_OURS.values()) <= set(REFERENCE_EVALS)


@pytest.mark.parametrize("name", SHIPPED_EVALS)
def test_evaluation_matches_the_reference_but_for_the_documented_differences(name):
    left = unexplained(evaluation_differences(name), EVAL_ALLOWED, name)
    reference_file = REFERENCE_EVALS[EVAL_OURS.get(name, name)]["file"]
    assert not left, f"{name} differs from reasoning-gym {REFERENCE_COMMIT} {reference_file}: {left}"


def test_every_allowed_evaluation_difference_is_still_needed_where_it_is_allowed():
    check_every_allowance_is_needed(SHIPPED_EVALS, evaluation_differences, EVAL_ALLOWED)


@pytest.mark.parametrize("name", SHIPPED_EVALS)
def test_evaluation_budget_is_its_training_configs_response_budget_or_the_references(name):
    """The reference's rule for max_tokens: the training config's max_response_length (intra games: 2048)."""
    config = load_config(EVAL_DIR / f"{name}.yaml")
    folder, stem = name.split("/")
    if stem == "algorithmic_retry":  # each try gets the budget; the training episode shares max_turns of them
        retry = composed(CONFIGS_DIR / folder / "algorithmic_qwen_3b_retry.yaml")
        assert retry.data.max_response_length == config.max_tokens * config.retry.max_turns
        assert (config.retry.max_turns, config.retry.discount) == (retry.retry.max_turns, retry.retry.discount)
        return
    if folder == "inter_generalisation":
        trained = [p for p in (CONFIGS_DIR / folder).glob("*_qwen_3b.yaml") if "retry" not in p.stem]
    elif folder == "intra_generalisation":
        trained = [CONFIGS_DIR / folder / f"{stem}_qwen_3b.yaml"]
    else:
        trained = [CONFIGS_DIR / folder / f"{stem}.yaml"]
    budgets = {composed(p).data.max_response_length for p in trained}
    assert budgets == {config.max_tokens} or name == "intra_generalisation/games", (budgets, config.max_tokens)


# ---- docs/experiments.md ----------------------------------------------------------------------------------------


def documented_keys(section: str) -> set[str]:
    """The keys in the first column of the table under ``### <section>`` of docs/experiments.md."""
    text = DOCS.read_text()
    body = text.split(f"### {section}\n", 1)[1].split("\n#", 1)[0]
    keys = set()
    for line in body.splitlines():
        if line.startswith("|") and not line.startswith("|---"):
            keys |= set(re.findall(r"`([^`]+)`", line.split("|")[1]))
    return keys


def test_docs_list_exactly_the_allowed_training_differences():
    assert documented_keys("Training configs") == set(ALLOWED)


def test_docs_list_exactly_the_allowed_evaluation_differences():
    assert documented_keys("Evaluation configs") == set(EVAL_ALLOWED)


def test_docs_list_the_settings_verl_no_longer_has():
    assert documented_keys("Settings verl 0.9.1 no longer has") == set(REMOVED)


def test_docs_name_the_reference_commit_and_pair_every_experiment_with_its_reference_file():
    text = DOCS.read_text()
    assert REFERENCE_COMMIT in text
    for experiment in SHIPPED:
        row = next((line for line in text.splitlines() if f"`configs/{experiment}.yaml`" in line), None)
        assert row is not None, f"docs/experiments.md has no row for configs/{experiment}.yaml"
        if experiment in REFERENCE:
            assert REFERENCE[experiment]["file"] in row, row
        else:
            assert "ours" in row, row
    for name in SHIPPED_EVALS:
        row = next((line for line in text.splitlines() if f"`evaluation/configs/{name}.yaml`" in line), None)
        assert row is not None, f"docs/experiments.md has no row for evaluation/configs/{name}.yaml"
        if name in REFERENCE_EVALS:
            assert REFERENCE_EVALS[name]["file"] in row, row
        else:
            assert "ours" in row, row
