"""train_oreo.py end to end on CPU: a resumed run lands exactly where an uninterrupted one does, two gloo
ranks train as one, and both models convert to Hugging Face models that give the engine's numbers.

Synthetic trajectories (tests/oreo_helpers.py) carry the plumbing; the learning check uses collected ones.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import torch

from rg_verl.checkpoint.cli import main as convert
from rg_verl.evaluation.cli import main as evaluate_main
from rg_verl.grpo.reward_curve import read_metrics
from tests.helpers import REPO
from tests.oreo_helpers import run_train_oreo, untied_copy, write_synthetic_trajectories

pytestmark = pytest.mark.slow

# the metrics that must agree between runs that should be the same run
COMPARED = ("oreo/value_loss", "oreo/policy_loss", "oreo/kl", "actor/grad_norm", "critic/grad_norm")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from rg_verl.cpu.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("oreo_e2e") / "tiny")


@pytest.fixture(scope="module")
def trajectories(model, tmp_path_factory):
    return write_synthetic_trajectories(model, tmp_path_factory.mktemp("trajectories"), n_train=32, n_val=8)


def train(workdir, model, trajectories, *overrides, ranks=1):
    metrics = workdir / "metrics.jsonl"
    run_train_oreo(
        workdir,
        f"actor.model.path={model}",
        f"data.train_files=[{trajectories / 'train'}]",
        f"data.val_files=[{trajectories / 'val'}]",
        f"trainer.default_local_dir={workdir / 'out'}",
        "trainer.logger=[console,file]",
        "data.train_batch_size=8",
        "data.micro_batch_size_per_gpu=2",
        *overrides,
        env={"VERL_FILE_LOGGER_PATH": str(metrics)},
        ranks=ranks,
    )
    return read_metrics(metrics)


def shards(folder):
    """The full weights of a checkpoint folder, every rank's shards assembled (by the project's converter)."""
    from safetensors.torch import load_file

    out = folder.parent / f"{folder.name}_hf"
    assert convert([str(folder), str(out)]) == 0
    return {name: t for path in sorted(out.glob("*.safetensors")) for name, t in load_file(path).items()}


def assert_same_metrics(a, b, steps, tol):
    for step in steps:
        for key in COMPARED:
            got, want = a[step][key], b[step][key]
            assert got == pytest.approx(want, rel=tol, abs=tol), (step, key, got, want)


@pytest.fixture(scope="module")
def straight(model, trajectories, tmp_path_factory):
    """One run of 4 steps saved at steps 2 and 4, shared by the tests that only read it: (folder, metrics)."""
    folder = tmp_path_factory.mktemp("straight")
    return folder, train(folder, model, trajectories, "trainer.total_training_steps=4", "trainer.save_freq=2")


def test_resume_continues_exactly(tmp_path, model, trajectories, straight):
    straight, whole = straight
    assert sorted(whole) == [0, 1, 2, 3, 4]

    resumed = tmp_path / "resumed"
    shutil.copytree(straight / "out", resumed / "out")
    shutil.rmtree(resumed / "out" / "global_step_4")
    (resumed / "out" / "latest_checkpointed_iteration.txt").write_text("2\n")
    again = train(resumed, model, trajectories, "trainer.total_training_steps=4", "trainer.save_freq=2")
    assert min(again) == 3  # no step before the checkpoint ran again
    assert_same_metrics(whole, again, [3, 4], tol=1e-6)
    for role in ("actor", "critic"):
        a, b = shards(straight / "out/global_step_4" / role), shards(resumed / "out/global_step_4" / role)
        assert a.keys() == b.keys()
        for name in a:
            torch.testing.assert_close(a[name], b[name], rtol=0, atol=1e-7, msg=f"{role} {name}")


def test_two_gloo_ranks_train_as_one(tmp_path, model, trajectories):
    model = untied_copy(model, tmp_path / "untied")
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir(), two.mkdir()
    single = train(one, model, trajectories, "trainer.total_training_steps=2")
    double = train(two, model, trajectories, "trainer.total_training_steps=2", ranks=2)
    assert_same_metrics(single, double, [1, 2], tol=1e-5)
    assert double[2]["train/reward_mean"] == single[2]["train/reward_mean"]
    assert double[2]["val/value_auc_last"] == pytest.approx(single[2]["val/value_auc_last"], abs=1e-6)
    for role in ("actor", "critic"):
        a, b = shards(one / "out/global_step_2" / role), shards(two / "out/global_step_2" / role)
        for name in a:
            torch.testing.assert_close(a[name], b[name], rtol=1e-4, atol=1e-6, msg=f"{role} {name}")


def test_tied_embeddings_on_two_cpu_ranks_are_refused_before_training(tmp_path, model, trajectories):
    proc = run_train_oreo(
        tmp_path,
        f"actor.model.path={model}",
        f"data.train_files=[{trajectories / 'train'}]",
        f"trainer.default_local_dir={tmp_path / 'out'}",
        "data.train_batch_size=8",
        "data.micro_batch_size_per_gpu=2",
        ranks=2,
        check=False,
    )
    assert proc.returncode != 0
    assert "tie_word_embeddings" in proc.stderr + proc.stdout
    assert not (tmp_path / "out" / "value_init").exists()  # refused before any model was touched


def test_both_models_convert_and_give_the_engines_numbers(tmp_path, trajectories, straight):
    """The converted critic is an AutoModelForTokenClassification whose values give the logged validation mean."""
    from transformers import AutoModelForCausalLM, AutoModelForTokenClassification

    from rg_verl.oreo.trajectories import load_trajectories

    folder, metrics = straight
    step = folder / "out" / "global_step_4"
    for role in ("actor", "critic"):
        proc = subprocess.run(
            [
                sys.executable,
                str(REPO / "utils/load_fsdp_to_hf.py"),
                str(step / role),
                str(tmp_path / f"{role}_hf"),
                "--verify",
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
    AutoModelForCausalLM.from_pretrained(tmp_path / "actor_hf")
    critic = AutoModelForTokenClassification.from_pretrained(tmp_path / "critic_hf").eval()
    assert critic.config.num_labels == 1
    last = []
    for t in load_trajectories(trajectories / "val"):
        ids = torch.tensor([list(t.prompt_ids) + list(t.response_ids)])
        with torch.no_grad():
            values = critic(ids).logits[0, :, 0]
        last.append(values[len(t.prompt_ids) + len(t.response_ids) - 2].item())  # V(s_{T-1}), before the last token
    assert sum(last) / len(last) == pytest.approx(metrics[4]["val/value_last_mean"], abs=1e-5)


def test_the_readme_smoke_commands_collect_train_convert_and_resume(tmp_path, model):
    """configs/oreo/smoke_cpu.yaml as docs/oreo.md runs it: collect, train two steps, convert both models,
    evaluate them with value-guided decoding, fine-tune the RFT baseline on the same trajectories and convert
    it; a second run with one more step resumes at step 3."""
    from tests.oreo_helpers import collect

    env = {"RG_VERL_OUTPUT": str(tmp_path / "outputs"), "RG_VERL_LEARN_MODEL": str(tmp_path / "warm")}
    trajectories = tmp_path / "outputs" / "oreo_smoke" / "trajectories"
    collect(tmp_path, trajectories, tmp_path / "warm", "--train-items", "8", "--val-items", "4", "--samples", "4")
    metrics = tmp_path / "metrics.jsonl"
    run_train_oreo(tmp_path, "trainer.logger=[console,file]", env={**env, "VERL_FILE_LOGGER_PATH": str(metrics)})
    assert sorted(read_metrics(metrics)) == [0, 1, 2]
    step = tmp_path / "outputs" / "oreo_smoke" / "global_step_2"
    for role in ("actor", "critic"):
        assert convert([str(step / role), str(tmp_path / f"{role}_hf"), "--verify"]) == 0
    for mode in ("value_beam", "value_rerank"):  # docs/oreo.md's value-guided evaluation of the converted pair
        assert evaluate_main([
            "--config", str(REPO / "evaluation" / "configs" / "smoke.yaml"), "--backend", "hf", "--device", "cpu",
            "--model-path", str(tmp_path / "actor_hf"), "--decoding", mode, "--value-model",
            str(tmp_path / "critic_hf"), "--output-dir", str(tmp_path / "eval"), "--run-name", mode,
        ]) == 0  # fmt: skip
        results = json.loads((tmp_path / "eval" / mode / "results.json").read_text())
        assert results["metadata"]["decoding"]["mode"] == mode and results["metrics"]["num_items"] > 0
    rft = subprocess.run([  # the baseline on the same trajectories: verl's SFT trainer on the rows scoring 1
        sys.executable, "-m", "rg_verl.cli", "oreo", "rft", "--trajectories", str(trajectories / "train"),
        "--model-path", str(tmp_path / "warm"), "--out", str(tmp_path / "rft"), "--device", "cpu", "--reward-key",
        "score", "data.train_batch_size=4", "data.micro_batch_size_per_gpu=2", "trainer.total_training_steps=2",
    ], cwd=tmp_path, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert rft.returncode == 0, rft.stdout[-3000:] + rft.stderr[-3000:]
    assert convert([str(tmp_path / "rft" / "global_step_2"), str(tmp_path / "rft_hf"), "--verify"]) == 0
    again = tmp_path / "again.jsonl"
    run_train_oreo(tmp_path, "trainer.logger=[console,file]", "trainer.total_training_steps=3",
                   env={**env, "VERL_FILE_LOGGER_PATH": str(again)})  # fmt: skip
    assert sorted(read_metrics(again)) == [3]  # resumed: no validation before training, no step before 3
    assert (step.parent / "latest_checkpointed_iteration.txt").read_text().strip() == "3"


def test_a_corrupt_trajectory_file_is_refused_before_any_model_loads(tmp_path, model, trajectories):
    broken = tmp_path / "broken" / "train"
    broken.mkdir(parents=True)
    (broken / "trajectories-00000.parquet").write_bytes(b"PAR1 not really a parquet file")
    proc = run_train_oreo(
        tmp_path, f"actor.model.path={model}", f"data.train_files=[{broken}]", "data.val_files=[]",
        f"trainer.default_local_dir={tmp_path / 'out'}", check=False,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "trajectories-00000.parquet" in proc.stderr and "Invalid config" in proc.stderr, proc.stderr[-2000:]
    assert not (tmp_path / "out" / "value_init").exists()


def test_a_corrupt_checkpoint_is_named_on_resume(tmp_path, model, trajectories, straight):
    shutil.copytree(straight[0] / "out", tmp_path / "out")
    (tmp_path / "out" / "global_step_4" / "trainer_state.json").write_text("{not json")
    proc = run_train_oreo(
        tmp_path, f"actor.model.path={model}", f"data.train_files=[{trajectories / 'train'}]",
        f"trainer.default_local_dir={tmp_path / 'out'}", "data.train_batch_size=8", "data.micro_batch_size_per_gpu=2",
        "data.val_files=[]", "trainer.total_training_steps=6", check=False,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "trainer_state.json" in proc.stderr and "corrupt" in proc.stderr, proc.stderr[-2000:]


@pytest.mark.parametrize("variant", ["step", "response"])
def test_the_step_and_response_variants_train(tmp_path, model, trajectories, variant):
    metrics = train(tmp_path, model, trajectories, "trainer.total_training_steps=2", f"oreo.variant={variant}",
                    "oreo.step_delimiters=[' ', '\\n']")  # fmt: skip
    assert metrics[1]["oreo/policy_loss"] == pytest.approx(metrics[1]["train/reward_mean"], abs=1e-6)  # V = 0, ρ = 0
    assert metrics[2]["oreo/kl"] > 0  # the actor moved
    assert (tmp_path / "out" / "global_step_2" / "actor").is_dir()


def test_a_reference_model_folder_gives_the_reference_log_probs(tmp_path, model, trajectories, straight):
    """``oreo.reference=<folder>`` (iterated OREO's fixed reference): the stored reference log-probs are that
    model's, by a direct transformers forward, not the actor's starting weights."""
    from transformers import AutoModelForCausalLM

    from rg_verl.oreo.trajectories import load_trajectories

    folder, _ = straight
    reference = tmp_path / "trained_hf"  # the straight run's actor after 4 steps: other weights, same vocabulary
    assert convert([str(folder / "out" / "global_step_4" / "actor"), str(reference)]) == 0
    train(tmp_path, model, trajectories, "trainer.total_training_steps=1", f"oreo.reference={reference}")
    stored = torch.load(tmp_path / "out" / "reference_log_probs.pt", weights_only=True)["log_probs"]
    initial = torch.load(folder / "out" / "reference_log_probs.pt", weights_only=True)["log_probs"]
    rows = load_trajectories(trajectories / "train", reward_key="accuracy")
    hf = AutoModelForCausalLM.from_pretrained(reference, dtype=torch.float32).eval()
    for t, got, start in list(zip(rows, stored, initial, strict=True))[:4]:
        ids = torch.tensor([list(t.prompt_ids) + list(t.response_ids)])
        with torch.no_grad():
            logits = hf(ids).logits[0].log_softmax(-1)
        n = len(t.prompt_ids)
        want = logits[torch.arange(n - 1, n - 1 + len(t.response_ids)), ids[0, n:]]
        assert torch.allclose(got, want, atol=1e-4)
        assert not torch.allclose(got, start, atol=1e-3)


def test_a_reference_folder_of_another_vocabulary_is_refused_before_training(tmp_path, model, trajectories):
    from rg_verl.cpu.tiny_model import build_tiny_model

    other = build_tiny_model(tmp_path / "other", vocab_size=300)
    proc = run_train_oreo(
        tmp_path, f"actor.model.path={model}", f"data.train_files=[{trajectories / 'train'}]", "data.val_files=[]",
        f"trainer.default_local_dir={tmp_path / 'out'}", f"oreo.reference={other}", check=False,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "oreo.reference" in proc.stderr and "vocabulary" in proc.stderr, proc.stderr[-2000:]
    assert not (tmp_path / "out" / "global_step_1").exists()
