"""The math path end to end on the CPU: the GSM8K configs of configs/math/, shrunk to the tiny model.

One 2-step run of the shipped GSM8K LoRA config (rank 64, alpha 32, all linear layers,
``load_format=safetensors`` and ``layered_summon``) through ``train_grpo.py``, on GSM8K fixture files
at the config's default relative path ``data/gsm8k/``. It covers:

- the GSM8K data path: items from the local files, scored by our reward (math-verify) in training and
  validation, with the self-correction flags logged;
- LoRA: verl wraps the FSDP actor with PEFT and syncs the adapter to the ``hf`` rollout after every
  step; the rollout's log-probs follow the adapter;
- the converter: the checkpoint converts both ways (merged, and base model plus PEFT adapter) into
  models that compute the same logits, which are not the base model's.

The reward is checked term by term on the same run: ``gsm8k_qwen_7b`` (full fine-tuning) is this config without
LoRA, and the curriculum run of tests/e2e/test_shipped_config_runs.py trains a shipped config in full.
"""

import json

import pytest
import torch
from peft import PeftModel
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from rg_verl.checkpoint import ADAPTER_DIR, convert_checkpoint
from tests.helpers import CONFIGS_DIR, train_on_cpu
from tests.math_fixtures import write_math_dirs

pytestmark = pytest.mark.slow

# the config's adapter
RANK, ALPHA = 64, 32
# what PEFT's "all-linear" selects in a Qwen2 decoder (it leaves the output layer out)
TARGETS = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("lora")
    write_math_dirs(workdir / "data")  # where the config looks by default: data/ under the working directory
    metrics = train_on_cpu(
        workdir,
        str(CONFIGS_DIR / "math"),
        "gsm8k_qwen_7b_lora",
        2,
        "reasoning_gym.val_size=2",
        # LoRA B starts at zero; a large lr moves it far in two Adam steps. The entropy bonus gives the
        # first step a gradient even if every group's rewards tie (GRPO's advantages are then zero).
        "actor_rollout_ref.actor.optim.lr=5e-2",
        "actor_rollout_ref.actor.entropy_coeff=0.01",
        env={"RG_VERL_DATA": None},
        save=True,
    )
    return workdir, metrics


def test_gsm8k_items_from_the_local_file_are_scored_by_our_reward(lora_run):
    _, metrics = lora_run
    step = metrics[2]
    assert {key.split("/")[2] for key in step if key.startswith("train/math/")} == {"gsm8k"}
    # only rg_verl.reward returns these keys; validation logs the revision flags (the revision rate)
    for key in ("score", "accuracy", "correct_strict", "correct_lenient", "revised", "self_corrected"):
        assert f"train/math/gsm8k/{key}" in step, key
        assert f"val-aux/math/gsm8k/{key}/mean@1" in step, key


@pytest.fixture(scope="module")
def converted(lora_run):
    workdir, _ = lora_run
    actor = workdir / "ckpt" / "global_step_2" / "actor"
    merged = convert_checkpoint(actor, workdir / "merged", verify=True, progress=False)
    kept = convert_checkpoint(actor, workdir / "kept", merge_lora=False, verify=True, progress=False)
    assert (merged.lora, kept.lora) == ("merged", "adapter")
    return workdir / "merged", workdir / "kept"


def test_rollout_serves_the_trained_adapter(lora_run):
    _, metrics = lora_run
    first, second = metrics[1], metrics[2]
    assert first["training/rollout_probs_diff_max"] < 1e-3 and second["training/rollout_probs_diff_max"] < 1e-3
    # With LoRA, verl's reference policy is the actor with its adapter disabled: the base model. Its
    # low_var_kl loss and rollout_corr/k3_kl are the same estimator (k3), of KL(actor || base) and of
    # KL(actor || rollout). At step 1 the adapter is still zero, so the actor is the base model.
    assert first["actor/kl_loss"] == pytest.approx(0.0, abs=1e-6)
    # At step 2 the adapter learnt in step 1 has moved the actor away from the base model; a rollout
    # that had not applied it would be as far from the actor. (The tiny model's near-uniform outputs
    # keep this KL small; measured: kl_loss 0.012, rollout k3_kl 1e-4, bf16 rounding; over 4 seed sets since,
    # kl_loss 0.016-0.028 and k3_kl 5e-5 to 8e-5: docs/testing.md, "False failures".)
    assert second["actor/kl_loss"] > 2e-3
    assert second["rollout_corr/k3_kl"] < second["actor/kl_loss"] / 20


def test_checkpoint_holds_the_adapter_and_frozen_base(lora_run, converted):
    workdir, _ = lora_run
    actor = workdir / "ckpt" / "global_step_2" / "actor"
    meta = json.loads((actor / "lora_train_meta.json").read_text())
    assert (meta["r"], meta["lora_alpha"]) == (RANK, ALPHA)
    merged, kept = converted
    config = json.loads((kept / ADAPTER_DIR / "adapter_config.json").read_text())
    assert (config["r"], config["lora_alpha"], set(config["target_modules"])) == (RANK, ALPHA, TARGETS)
    # LoRA trains the adapter only: the kept base weights are the initial model's, bit for bit
    initial = load_file(workdir / "model" / "model.safetensors")
    base = load_file(kept / "model.safetensors")
    assert base.keys() == initial.keys()
    assert all(torch.equal(base[name], initial[name]) for name in initial)
    assert not (merged / ADAPTER_DIR).exists()


def test_merged_model_equals_base_plus_adapter(lora_run, converted):
    workdir, _ = lora_run
    merged_dir, kept_dir = converted

    def load(path):
        return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()

    merged = load(merged_dir)
    base = load(workdir / "model")
    adapted = PeftModel.from_pretrained(load(workdir / "model"), kept_dir / ADAPTER_DIR).eval()
    ids = torch.randint(0, 1000, (4, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        merged_logits, adapted_logits, base_logits = (m(input_ids=ids).logits for m in (merged, adapted, base))
    # fp32 rounding of W + s·BA against W x + s·B(A x): measured up to 1e-5 at rank 64
    torch.testing.assert_close(merged_logits, adapted_logits, rtol=1e-4, atol=1e-4)
    # the adapter is far from zero, so the tolerance above cannot hide it
    assert (merged_logits - base_logits).abs().max() > 0.1


def test_the_configs_reward_is_lenient_correctness_plus_format_and_length(lora_run):
    """The GSM8K configs' reward (grpo_3b; gsm8k_qwen_7b, full fine-tuning, has the same, and the curriculum run of
    tests/e2e/test_shipped_config_runs.py trains a shipped config without LoRA), term by term."""
    _, metrics = lora_run
    for step in metrics.values():
        prefix = "train/math/gsm8k/"
        train = {key.removeprefix(prefix): v for key, v in step.items() if key.startswith(prefix)}
        # lenient correctness by math-verify + 0.2 format + 0.05 length
        expected = train["correct_lenient"] + 0.2 * train["term/format"] + 0.05 * train["term/length"]
        assert train["score"] == pytest.approx(expected) and train["term/length"] < 0
