"""FSDP -> Hugging Face conversion (rg_verl.checkpoint, utils/load_fsdp_to_hf.py) on real checkpoints.

One module fixture runs real FSDP over gloo in 3 CPU processes and saves through verl's own
FSDPCheckpointManager (rg_verl.checkpoint.synthetic): FSDP2 with 1, 2 and 3 ranks (3 shards dim 0
unevenly), FSDP2 with Shard(1) and with an HSDP (Replicate, Shard) mesh, FSDP1, hand-placed DTensors
(uneven Shard(1), Replicate, 0-d buffers) and PEFT LoRA models. Each rank takes one optimizer step first,
and rank 0 records what torch itself gathers (DTensor.full_tensor) and the sharded model's logits on a
fixed prompt, as references. The conversion of a real training run is in tests/e2e.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from rg_verl import checkpoint as ckpt_mod
from rg_verl.checkpoint import CheckpointError, OutputExistsError, convert_checkpoint, inspect_checkpoint
from rg_verl.checkpoint import convert as ckpt_convert
from rg_verl.checkpoint.synthetic import (
    cpu_mesh,
    full_state,
    gloo_group,
    quiet_worker,
    save_checkpoint,
    shard_like_verl,
)
from tests.checkpoint_helpers import PROMPT, load_hf, logits_of, output_tensors
from tests.helpers import REPO

LORA_TARGETS = ["q_proj", "v_proj", "gate_proj"]


# --------------------------------------------------------------------------------------------------
# Making real checkpoints (runs in spawned worker processes)
# --------------------------------------------------------------------------------------------------


def _save_trained(name: str, model, root: Path, tokenizer, train: bool = True) -> None:
    """One optimizer step, then verl's save (model, optimizer, extra state) and the references."""
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    if train:
        model(input_ids=PROMPT, labels=PROMPT).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    with torch.no_grad():
        logits = model(input_ids=PROMPT).logits.detach().clone()
    save_checkpoint(model, root / name / "actor", tokenizer, optimizer)
    _save_reference(root / name, model, logits)


def _save_reference(folder: Path, model, logits: torch.Tensor) -> None:
    """What torch gathers from the sharded model, and its logits on PROMPT, in ``folder/reference.pt``."""
    state = full_state(model)
    if dist.get_rank() == 0:
        torch.save({"logits": logits, "state": state}, folder / "reference.pt")
    dist.barrier()


def _from_pretrained(model_dir: str, **kwargs):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(model_dir, **kwargs)


def _fsdp2_uneven_and_hand_placed(rank: int, root: Path, model_dir: str) -> None:
    """3 ranks: FSDP2 (dim 0 of 64 rows splits 22/22/20), and hand-placed DTensors saved as they are."""
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    mesh = cpu_mesh(3)
    _save_trained("fsdp2_w3", shard_like_verl(_from_pretrained(model_dir), mesh), root, tok)

    # uneven Shard(1) of every matrix, Replicate vectors, 0-d buffers
    model = _from_pretrained(model_dir)
    with torch.no_grad():
        logits = model(input_ids=PROMPT).logits
    for name, param in list(model.named_parameters(remove_duplicate=False)):
        owner, attr = name.rsplit(".", 1)
        placement = Shard(1) if param.ndim == 2 else Replicate()
        setattr(model.get_submodule(owner), attr, torch.nn.Parameter(distribute_tensor(param.data, mesh, [placement])))
    model.register_buffer("extra_scalar", torch.tensor(3.5))
    model.register_buffer("extra_dt_scalar", distribute_tensor(torch.tensor(-1.25), mesh, [Replicate()]))
    save_checkpoint(model, root / "custom_w3" / "actor", tok)
    _save_reference(root / "custom_w3", model, logits)


def _fsdp2_placements_and_fsdp1(rank: int, root: Path, model_dir: str) -> None:
    """2 ranks: FSDP2 on dim 0, on dim 1 and over an HSDP mesh; FSDP1, and its flat parameters."""
    from torch.distributed.fsdp import FullyShardedDataParallel, StateDictType
    from torch.distributed.tensor import Shard
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    mesh = cpu_mesh(2)
    _save_trained("fsdp2_w2", shard_like_verl(_from_pretrained(model_dir), mesh), root, tok)
    dim1 = {"shard_placement_fn": lambda p: Shard(1) if p.ndim == 2 else Shard(0)}
    _save_trained("shard1_w2", shard_like_verl(_from_pretrained(model_dir), mesh, **dim1), root, tok)
    hsdp = cpu_mesh(2, 1, names=("ddp", "fsdp"))
    _save_trained("hsdp_w2", shard_like_verl(_from_pretrained(model_dir), hsdp), root, tok)

    model = FullyShardedDataParallel(_from_pretrained(model_dir), device_id=torch.device("cpu"), use_orig_params=True)
    _save_trained("fsdp1_w2", model, root, tok)
    with FullyShardedDataParallel.state_dict_type(model, StateDictType.LOCAL_STATE_DICT):
        flat = model.state_dict()  # FSDP1's flat parameters: verl never saves these
    (root / "flat_w2" / "actor").mkdir(parents=True, exist_ok=True)
    torch.save(flat, root / "flat_w2" / "actor" / f"model_world_size_2_rank_{rank}.pt")


def _lora_models(rank: int, root: Path, model_dir: str) -> None:
    """2 ranks, PEFT LoRA: on projections; on an untied input embedding; on one side of tied embeddings."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoTokenizer

    tok, mesh = AutoTokenizer.from_pretrained(model_dir), cpu_mesh(2)
    for name, targets, r, alpha, tie in (
        ("lora_w2", LORA_TARGETS, 4, 8, True),
        # untied, so LoRA on the input embedding is a faithful merge
        ("lora_emb_w2", ["embed_tokens", "q_proj", "down_proj"], 2, 6, False),
        ("lora_tied_w2", ["embed_tokens", "q_proj"], 2, 4, True),
    ):
        model = _from_pretrained(model_dir, **({} if tie else {"tie_word_embeddings": False}))
        config = LoraConfig(r=r, lora_alpha=alpha, target_modules=targets, task_type="CAUSAL_LM")
        model = get_peft_model(model, config)
        _save_trained(name, shard_like_verl(model, mesh, model.base_model.model.model.layers), root, tok)


def _a_different_model(rank: int, root: Path, model_dir: str) -> None:
    """2 ranks: a model with another MLP width, untrained, for the mismatch tests."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    config = AutoConfig.from_pretrained(model_dir)
    config.intermediate_size = 96
    torch.manual_seed(1)
    model = shard_like_verl(AutoModelForCausalLM.from_config(config), cpu_mesh(2))
    _save_trained("other_w2", model, root, AutoTokenizer.from_pretrained(model_dir), train=False)


def _fsdp2_on_one_rank(rank: int, root: Path, model_dir: str) -> None:
    """1 rank: FSDP2 over a 1-device mesh, still DTensors."""
    from transformers import AutoTokenizer

    model = shard_like_verl(_from_pretrained(model_dir), cpu_mesh(1))
    _save_trained("fsdp2_w1", model, root, AutoTokenizer.from_pretrained(model_dir))


# world size -> what that many ranks save; the processes of a smaller world are the first ranks of the larger
CHECKPOINTS_BY_WORLD = {
    3: (_fsdp2_uneven_and_hand_placed,),
    2: (_fsdp2_placements_and_fsdp1, _lora_models, _a_different_model),
    1: (_fsdp2_on_one_rank,),
}


def _worker(rank: int, root: str, model_dir: str) -> None:
    quiet_worker()
    torch.set_num_threads(1)
    for world, writers in CHECKPOINTS_BY_WORLD.items():
        if rank >= world:
            return
        with gloo_group(f"{root}/.init_{world}", rank, world):
            for write in writers:
                write(rank, Path(root), model_dir)


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory) -> Path:
    import torch.multiprocessing as mp

    from rg_verl.cpu.tiny_model import build_tiny_model

    root = tmp_path_factory.mktemp("fsdp_ckpts")
    model_dir = build_tiny_model(  # the sizes the assertions below count on
        root / "tiny",
        seed=0,
        hidden_size=64,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        intermediate_size=128,
        vocab_size=1024,
    )
    mp.spawn(_worker, args=(str(root), str(model_dir)), nprocs=3, join=True)
    return root


def actor(ckpts: Path, name: str) -> Path:
    return ckpts / name / "actor"


def reference(ckpts: Path, name: str) -> dict:
    return torch.load(ckpts / name / "reference.pt", weights_only=True)


# --------------------------------------------------------------------------------------------------
# What verl writes
# --------------------------------------------------------------------------------------------------


def test_verl_layout_is_what_the_converter_expects(ckpts):
    for name, world, version in (("fsdp2_w1", 1, 2), ("fsdp2_w2", 2, 2), ("fsdp2_w3", 3, 2), ("fsdp1_w2", 2, 1)):
        info = inspect_checkpoint(actor(ckpts, name))
        assert (info.world_size, info.fsdp_version) == (world, version)
        assert [p.name for p in info.model_files] == [f"model_world_size_{world}_rank_{r}.pt" for r in range(world)]
        assert (info.hf_dir / "config.json").is_file() and (info.hf_dir / "tokenizer.json").is_file()
    assert inspect_checkpoint(actor(ckpts, "lora_w2")).lora_meta == {"r": 4, "lora_alpha": 8, "task_type": "CAUSAL_LM"}
    # the placements the scenarios claim, as torch itself unpickles them
    shard = torch.load(actor(ckpts, "shard1_w2") / "model_world_size_2_rank_1.pt", weights_only=False)
    assert str(shard["model.layers.0.mlp.up_proj.weight"].placements) == "(Shard(dim=1),)"
    hsdp = torch.load(actor(ckpts, "hsdp_w2") / "model_world_size_2_rank_1.pt", weights_only=False)
    assert str(hsdp["model.norm.weight"].placements) == "(Replicate(), Shard(dim=0))"
    uneven = torch.load(actor(ckpts, "custom_w3") / "model_world_size_3_rank_2.pt", weights_only=False)
    assert uneven["model.layers.0.self_attn.q_proj.weight"].to_local().shape == (64, 20)  # 64 = 22 + 22 + 20
    assert uneven["extra_scalar"].shape == () and uneven["extra_dt_scalar"].to_local().shape == ()


# --------------------------------------------------------------------------------------------------
# Exactness: every tensor and the logits
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["fsdp2_w1", "fsdp2_w2", "fsdp2_w3", "shard1_w2", "hsdp_w2", "fsdp1_w2", "custom_w3"])
def test_converted_model_equals_the_trained_one(ckpts, tmp_path, name):
    ref = reference(ckpts, name)
    result = convert_checkpoint(actor(ckpts, name), tmp_path / "hf", verify=True, progress=False)
    assert result.verified and result.dtype == "float32"
    tensors = output_tensors(tmp_path / "hf")
    # tied embeddings are stored once, as save_pretrained does; everything else exactly as torch gathers it
    assert "lm_head.weight" not in tensors
    assert set(tensors) == set(ref["state"]) - {"lm_head.weight"}
    for key, value in ref["state"].items():
        assert torch.equal(tensors[key if key != "lm_head.weight" else "model.embed_tokens.weight"], value), key
    torch.testing.assert_close(logits_of(load_hf(tmp_path / "hf")), ref["logits"], rtol=1e-5, atol=1e-5)


def test_output_folder_is_what_save_pretrained_writes(ckpts, tmp_path):
    src = actor(ckpts, "fsdp2_w2")
    convert_checkpoint(src, tmp_path / "hf", progress=False)
    files = sorted(p.name for p in (tmp_path / "hf").iterdir())
    assert files == sorted(["model.safetensors", *(p.name for p in (src / "huggingface").iterdir())])
    with safe_open(tmp_path / "hf" / "model.safetensors", "pt") as f:
        assert f.metadata() == {"format": "pt"}
    from transformers import AutoTokenizer, GenerationConfig

    assert AutoTokenizer.from_pretrained(tmp_path / "hf").encode("<answer>") == AutoTokenizer.from_pretrained(
        src / "huggingface"
    ).encode("<answer>")
    assert GenerationConfig.from_pretrained(tmp_path / "hf").eos_token_id is not None


def test_bf16_and_sharded_output_with_index(ckpts, tmp_path):
    ref = reference(ckpts, "fsdp2_w3")
    result = convert_checkpoint(
        actor(ckpts, "fsdp2_w3"), tmp_path / "hf", dtype="bf16", max_shard_size="60KB", verify=True, progress=False
    )
    out = tmp_path / "hf"
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert len(result.weight_files) > 2 and sorted(set(index["weight_map"].values())) == list(result.weight_files)
    assert index["metadata"]["total_size"] == result.bytes_written - sum(
        8 + int.from_bytes((out / f).read_bytes()[:8], "little") for f in result.weight_files
    )
    assert json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"
    tensors = output_tensors(out)
    assert set(index["weight_map"]) == set(tensors)
    for key, value in tensors.items():
        assert value.dtype == torch.bfloat16 and torch.equal(value, ref["state"][key].bfloat16()), key
    model = load_hf(out, dtype=torch.bfloat16)
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())


def test_0d_buffers_and_replicated_tensors_are_kept_once(ckpts, tmp_path):
    convert_checkpoint(actor(ckpts, "custom_w3"), tmp_path / "hf", progress=False)
    tensors = output_tensors(tmp_path / "hf")
    assert tensors["extra_scalar"].shape == () and tensors["extra_scalar"].item() == 3.5
    assert tensors["extra_dt_scalar"].shape == () and tensors["extra_dt_scalar"].item() == -1.25
    assert tensors["model.norm.weight"].shape == (64,)  # Replicate on 3 ranks: not concatenated


def test_same_tensors_as_verl_model_merger(ckpts, tmp_path):
    src = actor(ckpts, "fsdp2_w3")
    verl_out = tmp_path / "verl"
    cmd = [sys.executable, "-m", "verl.model_merger", "merge", "--backend", "fsdp"]
    proc = subprocess.run(
        [*cmd, "--local_dir", str(src), "--target_dir", str(verl_out)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    convert_checkpoint(src, tmp_path / "ours", dtype="bf16", progress=False)  # verl's merger always writes bf16
    theirs, ours = output_tensors(verl_out), output_tensors(tmp_path / "ours")
    assert set(theirs) == set(ours)
    for key in ours:
        assert ours[key].dtype == theirs[key].dtype and torch.equal(ours[key], theirs[key]), key


# --------------------------------------------------------------------------------------------------
# LoRA
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["lora_w2", "lora_emb_w2", "lora_tied_w2"])
def test_lora_is_merged_by_default(ckpts, tmp_path, name):
    result = convert_checkpoint(actor(ckpts, name), tmp_path / "hf", verify=True, progress=False)
    assert result.lora == "merged" and not (tmp_path / "hf" / "lora_adapter").exists()
    assert not any("lora" in k or "base_layer" in k for k in output_tensors(tmp_path / "hf"))
    model = load_hf(tmp_path / "hf")
    if name == "lora_tied_w2":  # LoRA on one of two tied matrices: they must come apart
        assert not model.config.tie_word_embeddings
        assert "lm_head.weight" in output_tensors(tmp_path / "hf")
    torch.testing.assert_close(logits_of(model), reference(ckpts, name)["logits"], rtol=1e-5, atol=1e-5)


def test_lora_kept_as_a_peft_adapter(ckpts, tmp_path):
    from peft import PeftModel

    result = convert_checkpoint(actor(ckpts, "lora_w2"), tmp_path / "hf", merge_lora=False, verify=True, progress=False)
    assert result.lora == "adapter"
    adapter = tmp_path / "hf" / "lora_adapter"
    config = json.loads((adapter / "adapter_config.json").read_text())
    assert (config["r"], config["lora_alpha"], sorted(config["target_modules"])) == (4, 8, sorted(LORA_TARGETS))
    base = load_hf(tmp_path / "hf")
    ref = reference(ckpts, "lora_w2")
    # the base weights are the untouched pretrained ones; the adapter restores the trained model
    base_keys = {
        k.replace("base_model.model.", "").replace(".base_layer", "") for k in ref["state"] if "lora_" not in k
    }
    assert set(base.state_dict()) == base_keys
    assert (logits_of(base) - ref["logits"]).abs().max() > 1e-2  # the adapter matters
    model = PeftModel.from_pretrained(base, adapter).eval()
    torch.testing.assert_close(logits_of(model), ref["logits"], rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------------------------------
# Refusals and safety
# --------------------------------------------------------------------------------------------------


def copy_ckpt(ckpts: Path, name: str, dest: Path) -> Path:
    shutil.copytree(actor(ckpts, name), dest)
    return dest


def test_missing_shard_names_the_file(ckpts, tmp_path):
    src = copy_ckpt(ckpts, "fsdp2_w3", tmp_path / "actor")
    (src / "model_world_size_3_rank_1.pt").unlink()
    with pytest.raises(CheckpointError, match="model_world_size_3_rank_1.pt"):
        convert_checkpoint(src, tmp_path / "hf", progress=False)
    assert not (tmp_path / "hf").exists()


def test_truncated_shard_names_the_file(ckpts, tmp_path):
    src = copy_ckpt(ckpts, "fsdp2_w2", tmp_path / "actor")
    shard = src / "model_world_size_2_rank_1.pt"
    os.truncate(shard, shard.stat().st_size // 2)
    with pytest.raises(CheckpointError, match=r"model_world_size_2_rank_1\.pt.*truncated or corrupt"):
        convert_checkpoint(src, tmp_path / "hf", progress=False)
    assert not (tmp_path / "hf").exists()


def test_verify_catches_flipped_bits_in_a_shard(ckpts, tmp_path):
    src = copy_ckpt(ckpts, "fsdp2_w2", tmp_path / "actor")
    shard = src / "model_world_size_2_rank_0.pt"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF  # inside tensor data: the zip structure stays valid
    shard.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"model_world_size_2_rank_0\.pt: CRC check failed"):
        convert_checkpoint(src, tmp_path / "hf", verify=True, progress=False)
    assert not (tmp_path / "hf").exists()


def test_shards_of_different_models_are_refused_naming_both_files(ckpts, tmp_path):
    src = copy_ckpt(ckpts, "fsdp2_w2", tmp_path / "actor")
    shutil.copy(actor(ckpts, "other_w2") / "model_world_size_2_rank_1.pt", src)
    with pytest.raises(
        CheckpointError, match=r"mlp.*model_world_size_2_rank_1\.pt has shape \[96, 64\].*rank_0\.pt has"
    ):
        convert_checkpoint(src, tmp_path / "hf", progress=False)


def test_verify_refuses_shapes_that_do_not_fit_the_config(ckpts, tmp_path):
    with pytest.raises(
        CheckpointError, match=r"mlp.gate_proj.weight: the shards give shape \[128, 64\].*\[96, 64\].*rank_0\.pt"
    ):
        convert_checkpoint(
            actor(ckpts, "fsdp2_w2"),
            tmp_path / "hf",
            hf_dir=actor(ckpts, "other_w2") / "huggingface",
            verify=True,
            progress=False,
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_fsdp1_flat_parameters_are_refused_with_a_reason(ckpts, tmp_path):
    with pytest.raises(
        CheckpointError, match=r"model_world_size_2_rank_0\.pt: .*_flat_param is an FSDP1 flat parameter"
    ):
        convert_checkpoint(actor(ckpts, "flat_w2"), tmp_path / "hf", hf_dir=actor(ckpts, "fsdp1_w2") / "huggingface")


def test_shards_saved_from_gpus_are_read_on_the_cpu(ckpts, tmp_path, monkeypatch):
    src = copy_ckpt(ckpts, "fsdp2_w2", tmp_path / "actor")
    for rank in range(2):  # the same shards, their storages tagged as verl's GPU workers tag them
        path = src / f"model_world_size_2_rank_{rank}.pt"
        state = torch.load(path, weights_only=False)
        with monkeypatch.context() as m:
            m.setattr(torch.serialization, "location_tag", lambda storage, rank=rank: f"cuda:{rank}")
            torch.save(state, path)
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="CUDA"):
            torch.load(src / "model_world_size_2_rank_1.pt", weights_only=False)
    convert_checkpoint(src, tmp_path / "hf", verify=True, progress=False)
    convert_checkpoint(actor(ckpts, "fsdp2_w2"), tmp_path / "ref", progress=False)
    assert (tmp_path / "hf" / "model.safetensors").read_bytes() == (tmp_path / "ref" / "model.safetensors").read_bytes()


def test_code_in_a_pickle_is_never_run(tmp_path):
    src = tmp_path / "actor"
    src.mkdir()
    torch.save({"w": torch.ones(2), "evil": print}, src / "model_world_size_1_rank_0.pt")
    with pytest.raises(CheckpointError, match=r"model_world_size_1_rank_0\.pt.*unsupported object builtins\.print"):
        convert_checkpoint(src, tmp_path / "hf", progress=False)


def test_existing_output_needs_force(ckpts, tmp_path):
    out = tmp_path / "hf"
    out.mkdir()
    (out / "keep.txt").write_text("old")
    with pytest.raises(OutputExistsError, match="--force"):
        convert_checkpoint(actor(ckpts, "fsdp2_w1"), out, progress=False)
    assert (out / "keep.txt").read_text() == "old"
    convert_checkpoint(actor(ckpts, "fsdp2_w1"), out, force=True, progress=False)
    assert not (out / "keep.txt").exists() and (out / "model.safetensors").is_file()
    empty = tmp_path / "empty"
    empty.mkdir()
    convert_checkpoint(actor(ckpts, "fsdp2_w1"), empty, progress=False)  # an empty folder is not overwritten
    with pytest.raises(CheckpointError, match="would contain the checkpoint"):
        convert_checkpoint(actor(ckpts, "fsdp2_w1"), ckpts / "fsdp2_w1", force=True, progress=False)


@pytest.mark.parametrize("force", [False, True])
def test_a_folder_that_appears_while_converting_is_replaced_only_with_force(ckpts, tmp_path, monkeypatch, force):
    out, real = tmp_path / "hf", ckpt_convert.write_model

    def racing(*args):
        files = real(*args)
        out.mkdir()  # another process writes there meanwhile
        (out / "keep.txt").write_text("old")
        return files

    monkeypatch.setattr(ckpt_convert, "write_model", racing)
    with contextlib.nullcontext() if force else pytest.raises(OutputExistsError, match="--force"):
        convert_checkpoint(actor(ckpts, "fsdp2_w1"), out, force=force, progress=False)
    assert [p.name for p in tmp_path.iterdir()] == ["hf"]  # no staging folder left, nothing moved aside
    assert ("model.safetensors" in os.listdir(out)) if force else os.listdir(out) == ["keep.txt"]


@pytest.mark.parametrize("existing", [False, True])
def test_interrupted_conversion_leaves_no_output(ckpts, tmp_path, monkeypatch, existing):
    out = tmp_path / "hf"
    if existing:
        out.mkdir()
        (out / "keep.txt").write_text("old")
    real, calls = ckpt_convert.save_file, []

    def failing(tensors, path, metadata=None):
        calls.append(path)
        real(tensors, path, metadata=metadata)
        if len(calls) == 2:  # two weight files written, more to come
            raise KeyboardInterrupt

    monkeypatch.setattr(ckpt_convert, "save_file", failing)
    with pytest.raises(KeyboardInterrupt):
        convert_checkpoint(actor(ckpts, "fsdp2_w2"), out, force=existing, max_shard_size="100KB", progress=False)
    assert len(calls) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == (["hf"] if existing else [])  # no temp folder either
    if existing:
        assert [p.name for p in out.iterdir()] == ["keep.txt"]


def test_verify_catches_a_tampered_output(ckpts, tmp_path):
    out = tmp_path / "hf"
    convert_checkpoint(actor(ckpts, "fsdp2_w2"), out, progress=False)
    ckpt_mod.verify_conversion(actor(ckpts, "fsdp2_w2"), out)
    tensors = load_file(out / "model.safetensors")
    tensors["model.layers.1.mlp.down_proj.weight"][3, 7] += 1e-3
    save_file(tensors, out / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match=r"model.layers.1.mlp.down_proj.weight differs from rank 0's shard"):
        ckpt_mod.verify_conversion(actor(ckpts, "fsdp2_w2"), out)


# --------------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------------


def load_cli():
    spec = importlib.util.spec_from_file_location("load_fsdp_to_hf", REPO / "utils" / "load_fsdp_to_hf.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cli_converts_and_prints_a_summary(ckpts, tmp_path, capsys):
    script = REPO / "utils" / "load_fsdp_to_hf.py"
    args = [str(actor(ckpts, "fsdp2_w2")), str(tmp_path), "my-model", "--dtype", "bf16", "--verify"]
    proc = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Converting" in proc.stderr  # the progress bar
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("Converted 139,840 parameters (26 tensors) from 2 FSDP2 shard(s) to bfloat16")
    assert "verified" in last
    assert (tmp_path / "my-model" / "model.safetensors").is_file()
    # again without --force: refused, and the model is left as it was
    before = (tmp_path / "my-model" / "model.safetensors").read_bytes()
    assert load_cli().main([str(actor(ckpts, "fsdp2_w2")), str(tmp_path / "my-model"), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "already exists" in err and "--force" in err
    assert (tmp_path / "my-model" / "model.safetensors").read_bytes() == before


def test_cli_options_and_the_legacy_argument_order(ckpts, tmp_path, capsys):
    cli = load_cli()
    src = actor(ckpts, "lora_w2")
    assert cli.main([str(src), str(tmp_path / "a"), "--keep-lora", "--max-shard-size", "100KB", "--no-progress"]) == 0
    assert (tmp_path / "a" / "lora_adapter" / "adapter_model.safetensors").is_file()
    assert (tmp_path / "a" / "model.safetensors.index.json").is_file()
    # reasoning-gym's script took <actor> <huggingface config folder> <output>
    assert cli.main([str(src), str(src / "huggingface"), str(tmp_path / "b"), "--no-progress"]) == 0
    assert (tmp_path / "b" / "model.safetensors").is_file()
    assert "LoRA merged" in capsys.readouterr().out
    assert cli.main([str(tmp_path / "nowhere"), str(tmp_path / "c")]) == 1
    assert "not a folder" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main([str(src), str(tmp_path / "d"), "--dtype", "int8"])


def test_the_python_api_converts_as_the_command_does(ckpts, tmp_path):
    import rg_verl

    result = rg_verl.convert(actor(ckpts, "fsdp2_w2"), tmp_path / "api", progress=False)
    command = convert_checkpoint(actor(ckpts, "fsdp2_w2"), tmp_path / "command", progress=False)
    assert result.out_dir == tmp_path / "api" and result.num_tensors == command.num_tensors
    api, cli = output_tensors(tmp_path / "api"), output_tensors(tmp_path / "command")
    assert set(api) == set(cli) and all(torch.equal(api[key], cli[key]) for key in api)
