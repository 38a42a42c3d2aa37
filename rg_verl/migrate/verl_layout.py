"""verl c342069's ``ppo_trainer`` layout, the verl reasoning-gym's training scripts pinned, in verl 0.9.1's terms."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rg_verl.migrate.tree import MISSING, Migration, flatten, get, known, merge, same

__all__ = ["OLD_VERL_DEFAULTS", "REMOVED", "RENAMED", "as_run", "hydra", "verl"]

# the sections (and keys) of the reference's own schema: rg_verl.migrate.reference migrates them
REFERENCE_KEYS = ("reasoning_gym", "curriculum", "reward.use_accuracy", "reward.secondary_rewards")

# the defaults of verl c342069's ppo_trainer.yaml: a config listing ppo_trainer ran with them where it is silent
# fmt: off
OLD_VERL_DEFAULTS: dict[str, Any] = {
    "data": {
        "tokenizer": None, "train_files": "~/data/rlhf/gsm8k/train.parquet",
        "val_files": "~/data/rlhf/gsm8k/test.parquet", "prompt_key": "prompt", "max_prompt_length": 512,
        "max_response_length": 512, "train_batch_size": 1024, "val_batch_size": None,
        "return_raw_input_ids": False, "return_raw_chat": False, "shuffle": True,
        "filter_overlong_prompts": False, "truncation": "error", "image_key": "images",
    },
    "actor_rollout_ref": {
        "hybrid_engine": True,
        "model": {
            "path": "~/models/deepseek-llm-7b-chat", "external_lib": None, "override_config": {},
            "enable_gradient_checkpointing": True, "use_remove_padding": False,
        },
        "actor": {
            "strategy": "fsdp", "ppo_mini_batch_size": 256, "ppo_micro_batch_size": None,
            "ppo_micro_batch_size_per_gpu": None, "use_dynamic_bsz": False, "ppo_max_token_len_per_gpu": 16384,
            "grad_clip": 1.0, "clip_ratio": 0.2, "entropy_coeff": 0.001, "use_kl_loss": False,
            "use_torch_compile": True, "kl_loss_coef": 0.001, "kl_loss_type": "low_var_kl", "ppo_epochs": 1,
            "shuffle": False, "ulysses_sequence_parallel_size": 1,
            "optim": {
                "lr": 1e-6, "lr_warmup_steps": -1, "lr_warmup_steps_ratio": 0.0, "min_lr_ratio": None,
                "warmup_style": "constant", "total_training_steps": -1,
            },
            "fsdp_config": {
                "wrap_policy": {"min_num_params": 0}, "param_offload": False, "optimizer_offload": False,
                "fsdp_size": -1,
            },
        },
        "ref": {
            "fsdp_config": {"param_offload": False, "wrap_policy": {"min_num_params": 0}},
            "log_prob_micro_batch_size": None, "log_prob_micro_batch_size_per_gpu": None,
            "log_prob_use_dynamic_bsz": "${actor_rollout_ref.actor.use_dynamic_bsz}",
            "log_prob_max_token_len_per_gpu": "${actor_rollout_ref.actor.ppo_max_token_len_per_gpu}",
            "ulysses_sequence_parallel_size": "${actor_rollout_ref.actor.ulysses_sequence_parallel_size}",
        },
        "rollout": {
            "name": "vllm", "temperature": 1.0, "top_k": -1, "top_p": 1, "use_fire_sampling": False,
            "prompt_length": "${data.max_prompt_length}", "response_length": "${data.max_response_length}",
            "dtype": "bfloat16", "gpu_memory_utilization": 0.5, "ignore_eos": False, "enforce_eager": True,
            "free_cache_engine": True, "load_format": "dummy_dtensor", "tensor_model_parallel_size": 2,
            "max_num_batched_tokens": 8192, "max_model_len": None, "max_num_seqs": 1024,
            "log_prob_micro_batch_size": None, "log_prob_micro_batch_size_per_gpu": None,
            "log_prob_use_dynamic_bsz": "${actor_rollout_ref.actor.use_dynamic_bsz}",
            "log_prob_max_token_len_per_gpu": "${actor_rollout_ref.actor.ppo_max_token_len_per_gpu}",
            "disable_log_stats": True, "enable_chunked_prefill": True, "do_sample": True, "n": 1,
            "val_kwargs": {"top_k": -1, "top_p": 1.0, "temperature": 0, "n": 1, "do_sample": False},
        },
    },
    "critic": {
        "strategy": "fsdp",
        "optim": {
            "lr": 1e-5, "lr_warmup_steps_ratio": 0.0, "min_lr_ratio": None, "warmup_style": "constant",
            "total_training_steps": -1,
        },
        "model": {
            "path": "~/models/deepseek-llm-7b-chat", "tokenizer_path": "${actor_rollout_ref.model.path}",
            "override_config": {}, "external_lib": "${actor_rollout_ref.model.external_lib}",
            "enable_gradient_checkpointing": True, "use_remove_padding": False,
            "fsdp_config": {
                "param_offload": False, "optimizer_offload": False, "wrap_policy": {"min_num_params": 0},
                "fsdp_size": -1,
            },
        },
        "ppo_mini_batch_size": "${actor_rollout_ref.actor.ppo_mini_batch_size}", "ppo_micro_batch_size": None,
        "ppo_micro_batch_size_per_gpu": None, "forward_micro_batch_size": "${critic.ppo_micro_batch_size}",
        "forward_micro_batch_size_per_gpu": "${critic.ppo_micro_batch_size_per_gpu}",
        "use_dynamic_bsz": "${actor_rollout_ref.actor.use_dynamic_bsz}", "ppo_max_token_len_per_gpu": 32768,
        "forward_max_token_len_per_gpu": "${critic.ppo_max_token_len_per_gpu}", "ulysses_sequence_parallel_size": 1,
        "ppo_epochs": "${actor_rollout_ref.actor.ppo_epochs}", "shuffle": "${actor_rollout_ref.actor.shuffle}",
        "grad_clip": 1.0, "cliprange_value": 0.5,
    },
    "reward_model": {
        "enable": False, "strategy": "fsdp",
        "model": {
            "input_tokenizer": "${actor_rollout_ref.model.path}", "path": "~/models/FsfairX-LLaMA3-RM-v0.1",
            "external_lib": "${actor_rollout_ref.model.external_lib}", "use_remove_padding": False,
            "fsdp_config": {"wrap_policy": {"min_num_params": 0}, "param_offload": False, "fsdp_size": -1},
        },
        "micro_batch_size": None, "micro_batch_size_per_gpu": None, "max_length": None,
        "ulysses_sequence_parallel_size": 1, "use_dynamic_bsz": "${critic.use_dynamic_bsz}",
        "forward_max_token_len_per_gpu": "${critic.forward_max_token_len_per_gpu}", "reward_manager": "naive",
    },
    "custom_reward_function": {"path": None, "name": "compute_score"},
    "algorithm": {
        "gamma": 1.0, "lam": 1.0, "adv_estimator": "gae", "kl_penalty": "kl",
        "kl_ctrl": {"type": "fixed", "kl_coef": 0.001},
    },
    "trainer": {
        "balance_batch": True, "total_epochs": 30, "total_training_steps": None, "project_name": "verl_examples",
        "experiment_name": "gsm8k", "logger": ["console", "wandb"], "val_generations_to_log_to_wandb": 0,
        "nnodes": 1, "n_gpus_per_node": 8, "save_freq": -1, "resume_mode": "auto", "resume_from_path": False,
        "test_freq": -1, "critic_warmup": 0, "default_hdfs_dir": None, "remove_previous_ckpt_in_save": False,
        "del_local_ckpt_after_load": False,
        "default_local_dir": "checkpoints/${trainer.project_name}/${trainer.experiment_name}",
    },
}
# fmt: on

# old name -> verl 0.9.1's name
RENAMED = {
    "trainer.val_generations_to_log_to_wandb": "trainer.log_val_generations",
    "actor_rollout_ref.actor.optim.warmup_style": "actor_rollout_ref.actor.optim.lr_scheduler_type",
    "critic.optim.warmup_style": "critic.optim.lr_scheduler_type",
}
# old prefix -> verl 0.9.1's prefix
RENAMED_PREFIXES = {"critic.model.fsdp_config.": "critic.fsdp."}
# key -> {old value: the value that means the same in verl 0.9.1}
OLD_VALUES = {
    "actor_rollout_ref.rollout.load_format": {
        **dict.fromkeys(("dummy_dtensor", "dummy_hf", "dummy_megatron"), "dummy"),
        **dict.fromkeys(("dtensor", "hf", "megatron"), "auto"),
    },
    "trainer.resume_from_path": {False: None},
    "actor_rollout_ref.actor.optim.min_lr_ratio": {None: 0.0},
    "critic.optim.min_lr_ratio": {None: 0.0},
}
# keys verl 0.9.1 no longer has: key -> why
REMOVED = {
    "actor_rollout_ref.rollout.use_fire_sampling": "verl 0.9.1 removed FIRE sampling",
    "verbose": "read by neither the reference's training code nor verl",
}
_RLHF_KEYS = (
    "tokenizer",
    "prompt_key",
    "return_raw_input_ids",
    "return_raw_chat",
    "filter_overlong_prompts",
    "image_key",
)
_RLHF_ONLY = "read only by verl's file dataset (RLHFDataset); the reference's dataset never read it, nor does rg-verl's"
# keys whose value the reference never used: key -> why it does not matter (None: both trainers overwrite it)
NOT_READ = {
    "data.train_files": (
        "the reference generated its items from the reasoning_gym section and never read these files; "
        "rg-verl's splits (reasoning_gym://train, reasoning_gym://val) take their place"
    ),
    "data.val_files": "the reference's validation items came from the reasoning_gym section, as rg-verl's do",
    "data.val_batch_size": (
        "the reference validated on its whole validation set in one batch and never read it; "
        "verl 0.9.1 deprecates it and does the same when it is null"
    ),
    "data.shuffle": "the reference's dataloader always shuffled, whatever this said; rg-verl keeps data.shuffle",
    **{f"data.{key}": _RLHF_ONLY for key in _RLHF_KEYS},
    "data.truncation": (
        "the reference's dataset always failed on a prompt over max_prompt_length; "
        "verl 0.9.1's agent loop left-truncates it with a warning"
    ),
    "actor_rollout_ref.actor.optim.total_training_steps": None,
    "critic.optim.total_training_steps": None,
}
# the old reward_model section: key -> verl 0.9.1's (the rest configured an FSDP reward-model worker)
REWARD_MODEL_KEYS = {
    "reward_model.enable": "reward.reward_model.enable",
    "reward_model.model.path": "reward.reward_model.model_path",
    "reward_model.reward_manager": "reward.reward_manager.name",
}


def _defaults_list(old: Mapping) -> list:
    entries = old.get("defaults")
    return entries if isinstance(entries, list) else []


def as_run(old: Mapping) -> dict:
    """The old config as the old code ran it: verl's old defaults under it when it lists ``ppo_trainer``."""
    entries = _defaults_list(old)
    listed = any(e == "ppo_trainer" or (isinstance(e, Mapping) and "ppo_trainer" in e.values()) for e in entries)
    return merge(OLD_VERL_DEFAULTS, old) if listed else merge({}, old)


def hydra(m: Migration) -> None:
    """``defaults`` and ``hydra``: ours replace the old defaults and searchpath; other hydra keys stay."""
    for entry in _defaults_list(m.old):
        if entry not in ("ppo_trainer", "_self_"):
            m.report("defaults", f"{entry!r}: not a config rg-verl has; add it to the new defaults yourself")
    hydra = m.old.get("hydra") or {}
    if not isinstance(hydra, Mapping):
        m.report("hydra", f"{hydra!r} is not a mapping; not carried over")
        return
    for key, value in flatten(hydra).items():
        if key != "searchpath":
            m.desired[f"hydra.{key}"] = value
            continue
        for entry in value if isinstance(value, list) else [value]:
            if not str(entry).rstrip("/").endswith("verl/trainer/config"):
                m.report("hydra.searchpath", f"{entry!r}: not verl's config folder; add it yourself")


def _trains_critic(m: Migration) -> bool:
    estimator = get(m.old, "algorithm.adv_estimator")
    if estimator is MISSING:
        estimator = get(m.defaults, "algorithm.adv_estimator")
    return get(m.old, "critic.enable") is True or estimator == "gae"


def verl(m: Migration) -> None:
    """Every key outside the reference's own sections (:data:`REFERENCE_KEYS`)."""
    ours = (*REFERENCE_KEYS, "hydra", "defaults")
    keys = {p: v for p, v in flatten(m.old).items() if not any(p == k or p.startswith(f"{k}.") for k in ours)}
    skipped = {"critic": 0, "reward_model": 0}
    trains_critic, reward_model = _trains_critic(m), get(m.old, "reward_model.enable") is True
    for path, value in keys.items():
        section = path.split(".")[0]
        if section == "critic" and not trains_critic or section == "reward_model" and not reward_model:
            if path == "reward_model.enable":
                m.set(REWARD_MODEL_KEYS[path], value)
            skipped[section] += path in m.written and path != "reward_model.enable"
        elif section == "reward_model":
            _reward_model_key(m, path, value)
        elif section == "custom_reward_function":
            if path in m.written and value is not None:
                m.report(path, "the reference scored with its own reward and never read it; rg-verl's reward "
                         "(reward.custom_reward_function: rg_verl.reward.compute_score) is kept")  # fmt: skip
        else:
            verl_key(m, path, value)
    if skipped["critic"]:
        m.report("critic", f"the run trains no critic (verl 0.9.1 builds one only for adv_estimator=gae or "
                 f"critic.enable=true): its {skipped['critic']} settings are not carried over")  # fmt: skip
    if skipped["reward_model"]:
        m.report("reward_model", f"enable is false, so the reference ran no reward model: its "
                 f"{skipped['reward_model']} settings are not carried over")  # fmt: skip
    if get(m.old, "actor_rollout_ref.actor.use_kl_loss") is False:
        # the reference's trainer put the KL penalty in the reward whenever the KL loss was off
        m.set("algorithm.use_kl_in_reward", True)


def _reward_model_key(m: Migration, path: str, value: Any) -> None:
    if path in REWARD_MODEL_KEYS:
        m.set(REWARD_MODEL_KEYS[path], value)
    elif path in m.written:
        m.report(path, "verl 0.9.1 serves a reward model as an inference server (reward.reward_model.rollout); "
                 "this setting of the old FSDP worker has no equivalent")  # fmt: skip


def new_name(path: str) -> str:
    """verl 0.9.1's name of an old key (itself when it kept it)."""
    for old, new in RENAMED_PREFIXES.items():
        if path.startswith(old):
            return new + path[len(old) :]
    return RENAMED.get(path, path)


def verl_key(m: Migration, path: str, value: Any) -> None:
    """One old verl key (or one of verl 0.9.1's that the old file already spells)."""
    written = path in m.written
    if path in REMOVED:
        if written:
            lost = " (off here, so nothing is lost)" if value in (False, None) else ""
            m.report(path, f"{REMOVED[path]}{lost}; not carried over")
    elif path in NOT_READ:
        if written and NOT_READ[path] and not same(value, get(m.defaults, path), path):
            m.report(path, f"{value!r}: {NOT_READ[path]}")
    elif path == "trainer.remove_previous_ckpt_in_save":
        if value:  # verl 0.9.1 keeps the newest N checkpoints instead
            m.set("trainer.max_actor_ckpt_to_keep", 1)
            m.set("trainer.max_critic_ckpt_to_keep", 1)
    elif known(m.defaults, new := new_name(path)):
        spelled = OLD_VALUES.get(new, {})
        m.set(new, next((v for k, v in spelled.items() if same(k, value)), value))
    elif written:
        m.report(path, "neither a key of verl 0.9.1's config nor of the reference's schema; not carried over")
