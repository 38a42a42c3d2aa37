"""rg-verl's FSDP -> Hugging Face converter against verl's model_merger, on a ~0.5B-parameter checkpoint.

    python bench/convert.py [--workdir DIR] [--keep] [--repeats 3]

1. Builds a randomly initialised Qwen2 with Qwen2.5-0.5B's shapes (494M parameters, tied embeddings),
   shards it with FSDP2 (``fully_shard`` per decoder layer and at the root, as verl does) over 2 gloo
   ranks on the CPU and saves it through verl's ``FSDPCheckpointManager`` (model only), with
   ``rg_verl.checkpoint.synthetic``. The checkpoint is reused from ``--workdir`` when it is already there.
2. Times, side by side, each in a fresh process (so peak RSS is per arm) and after its imports:
   ``copy``:  a plain copy of the model shard bytes (read + write + fsync): the disk limit;
   ``ours``:  ``rg_verl.checkpoint.convert_checkpoint`` to bf16;
   ``verl``:  ``verl.model_merger``'s ``FSDPModelMerger.merge_and_save`` (what ``python -m
              verl.model_merger merge --backend fsdp`` runs; it always writes bf16);
   ``torch.load``: the library route: ``torch.load(mmap=True, weights_only=True)`` of each shard file, the
              full tensors joined from the DTensor placements, written with safetensors in
              ``huggingface_hub``'s shards (:func:`arm_torch_load`);
   ``ours-fp32``: ours at ``--dtype auto`` (fp32, lossless), for reference.
3. Checks ours and verl's outputs hold the same tensors, bit for bit (and the library route's and ours), and prints
   the ratios.

All reads come from the page cache (the checkpoint was just written or read), so the numbers compare
the converters' own work, not a cold disk.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORLD_SIZE = 2
# Qwen2.5-0.5B's shapes
MODEL = dict(
    hidden_size=896,
    intermediate_size=4864,
    num_hidden_layers=24,
    num_attention_heads=14,
    num_key_value_heads=2,
    vocab_size=151936,
    max_position_embeddings=32768,
    tie_word_embeddings=True,
    architectures=["Qwen2ForCausalLM"],
)


# --------------------------------------------------------------------------------------------------
# The checkpoint
# --------------------------------------------------------------------------------------------------


def _save_worker(rank: int, actor: str, tiny: str, init: str) -> None:
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    from rg_verl.checkpoint.synthetic import cpu_mesh, gloo_group, quiet_worker, save_checkpoint, shard_like_verl

    quiet_worker()
    with gloo_group(init, rank, WORLD_SIZE):
        tokenizer = AutoTokenizer.from_pretrained(tiny)
        config = Qwen2Config(**MODEL, bos_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
        config.name_or_path = tiny  # the manager copies the generation config from here
        with torch.device("meta"):  # each rank materialises only its own shards
            model = Qwen2ForCausalLM(config)
        shard_like_verl(model, cpu_mesh(WORLD_SIZE))
        model.to_empty(device="cpu")
        generator = torch.Generator().manual_seed(rank)
        with torch.no_grad():
            for name, param in model.named_parameters():
                local = param.to_local()
                if name.endswith("norm.weight"):
                    local.fill_(1.0)
                else:
                    local.normal_(0.0, 0.02, generator=generator)
        save_checkpoint(model, actor, tokenizer)


def make_checkpoint(workdir: Path) -> Path:
    actor = workdir / "global_step_1" / "actor"
    marker = workdir / "checkpoint.json"
    if marker.is_file() and json.loads(marker.read_text()) == MODEL and actor.is_dir():
        print(f"reusing the checkpoint in {actor}")
        return actor
    import torch.multiprocessing as mp

    from rg_verl.cpu.tiny_model import ensure_tiny_model

    shutil.rmtree(workdir / "global_step_1", ignore_errors=True)
    tiny = ensure_tiny_model(workdir / "tokenizer-source")  # only its tokenizer is used
    init = workdir / f".init-{os.getpid()}"
    start = time.perf_counter()
    mp.spawn(_save_worker, args=(str(actor), str(tiny), str(init)), nprocs=WORLD_SIZE, join=True)
    init.unlink(missing_ok=True)
    marker.write_text(json.dumps(MODEL))
    print(f"saved a {WORLD_SIZE}-rank FSDP2 checkpoint in {time.perf_counter() - start:.0f} s: {actor}")
    return actor


# --------------------------------------------------------------------------------------------------
# The arms, each run in a child process: `python bench/convert.py --arm NAME SRC DST`
# --------------------------------------------------------------------------------------------------


def arm_copy(src: Path, dst: Path) -> None:
    dst.mkdir(parents=True)
    for f in sorted(src.glob("model_world_size_*_rank_*.pt")):
        shutil.copyfile(f, dst / f.name)
        fd = os.open(dst / f.name, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)


def arm_ours(src: Path, dst: Path, dtype: str = "bf16") -> None:
    from rg_verl.checkpoint import convert_checkpoint

    convert_checkpoint(src, dst, dtype=dtype, progress=False)


def arm_verl(src: Path, dst: Path) -> None:
    from verl.model_merger.base_model_merger import ModelMergerConfig
    from verl.model_merger.fsdp_model_merger import FSDPModelMerger

    config = ModelMergerConfig(
        operation="merge",
        backend="fsdp",
        local_dir=str(src),
        target_dir=str(dst),
        hf_model_config_path=str(src / "huggingface"),
    )
    merger = FSDPModelMerger(config)
    merger.merge_and_save()
    merger.cleanup()


def arm_torch_load(src: Path, dst: Path) -> None:
    """The library route: each rank's shard file through ``torch.load(mmap=True, weights_only=True)`` (verl's DTensor
    shards with their placements; no code runs), each full tensor joined from its shards along its ``Shard`` dim
    and cast to bf16, written with safetensors in ``huggingface_hub``'s shards, one shard file at a time; the
    config, generation config and tokenizer copied from the checkpoint's ``huggingface/`` folder."""
    import re

    import torch
    from huggingface_hub import split_torch_state_dict_into_shards
    from safetensors.torch import save_file
    from torch.distributed.tensor import DTensor, Shard

    files = sorted(src.glob("model_world_size_*_rank_*.pt"), key=lambda f: int(re.findall(r"\d+", f.stem)[-1]))
    ranks = [torch.load(f, mmap=True, weights_only=True, map_location="cpu") for f in files]
    config = json.loads((src / "huggingface" / "config.json").read_text())
    names = [k for k in ranks[0] if not (config.get("tie_word_embeddings") and k == "lm_head.weight")]

    def full(name: str) -> torch.Tensor:
        first = ranks[0][name]
        if not isinstance(first, DTensor):
            return first.to(torch.bfloat16)
        [placement] = first.placements
        if not isinstance(placement, Shard):  # replicated: every rank holds it whole
            return first.to_local().to(torch.bfloat16)
        return torch.cat([rank[name].to_local().to(torch.bfloat16) for rank in ranks], dim=placement.dim)

    shapes = {name: torch.empty(ranks[0][name].shape, dtype=torch.bfloat16, device="meta") for name in names}
    split = split_torch_state_dict_into_shards(shapes, max_shard_size="5GB")
    shutil.copytree(src / "huggingface", dst)
    for filename, tensors in split.filename_to_tensors.items():
        save_file({name: full(name) for name in tensors}, dst / filename, metadata={"format": "pt"})
    if split.is_sharded:
        index = {"metadata": split.metadata, "weight_map": split.tensor_to_filename}
        (dst / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))


ARMS = {
    "copy": (arm_copy, []),
    "torch.load": (arm_torch_load, ["huggingface_hub", "safetensors.torch", "torch.distributed.tensor"]),
    "ours": (arm_ours, ["rg_verl.checkpoint", "transformers", "safetensors", "tqdm"]),
    "ours-fp32": (lambda s, d: arm_ours(s, d, "auto"), ["rg_verl.checkpoint", "transformers", "safetensors", "tqdm"]),
    "verl": (arm_verl, ["verl.model_merger.fsdp_model_merger", "transformers", "safetensors", "tqdm"]),
}


def peak_rss() -> int:
    """This process's peak resident set, in bytes.

    /proc's VmHWM, not getrusage: Linux carries ru_maxrss across exec, so a child's would start at the
    parent's size.
    """
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def child(arm: str, src: Path, dst: Path) -> None:
    import importlib

    import torch  # noqa: F401 - every arm but copy needs it; import before timing for all

    func, modules = ARMS[arm]
    for m in modules:
        importlib.import_module(m)
    if arm == "ours" or arm == "ours-fp32":  # ours builds the config's model on the meta device: warm it too
        import transformers  # noqa: F401
    rss_before = peak_rss()
    start = time.perf_counter()
    func(src, dst)
    seconds = time.perf_counter() - start
    peak = peak_rss()
    print(json.dumps({"seconds": seconds, "peak_rss": peak, "rss_after_imports": rss_before}))


def run_arm(arm: str, src: Path, dst: Path) -> dict:
    shutil.rmtree(dst, ignore_errors=True)
    os.sync()  # each arm starts with no dirty pages left by the one before
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, __file__, "--arm", arm, str(src), str(dst)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{arm} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["process_seconds"] = wall
    result["bytes"] = sum(f.stat().st_size for f in dst.rglob("*") if f.is_file())
    return result


def same_tensors(a: Path, b: Path) -> bool:
    import torch
    from safetensors import safe_open

    def index(folder: Path) -> dict[str, Path]:
        out = {}
        for f in sorted(folder.glob("*.safetensors")):
            with safe_open(f, "pt") as st:
                out.update({k: f for k in st.keys()})
        return out

    ia, ib = index(a), index(b)
    if set(ia) != set(ib):
        only_ours, only_verl = sorted(set(ia) - set(ib))[:5], sorted(set(ib) - set(ia))[:5]
        print(f"different tensor names: only ours {only_ours}, only verl {only_verl}")
        return False
    for key in sorted(ia):
        with safe_open(ia[key], "pt") as fa, safe_open(ib[key], "pt") as fb:
            ta, tb = fa.get_tensor(key), fb.get_tensor(key)
            if ta.dtype != tb.dtype or not torch.equal(ta, tb):
                print(f"{key} differs")
                return False
    return True


def model_size(actor: Path) -> tuple[int, int]:
    """Parameters and bytes of the checkpoint's model as stored (fp32), the tied lm_head counted once."""
    from rg_verl.checkpoint import inspect_checkpoint
    from rg_verl.checkpoint.assembly import Checkpoint

    with Checkpoint(inspect_checkpoint(actor)) as ckpt:
        unique = [s for s in ckpt.sources.values() if s.key != "lm_head.weight"]
        return sum(s.numel for s in unique), sum(s.numel * s.dtype.itemsize for s in unique)


def report(results: dict[str, dict], model_bytes: int, identical: bool, identical_library: bool) -> None:
    """The table of arms, then the ratios against the goals."""
    print(f"\n{'arm':<10} {'seconds':>8} {'process s':>10} {'peak RSS GB':>12} {'RSS/model':>10} {'written GB':>11}")
    for arm, r in results.items():
        print(
            f"{arm:<10} {r['seconds']:8.2f} {r['process_seconds']:10.1f} {r['peak_rss'] / 1e9:12.2f} "
            f"{r['peak_rss'] / model_bytes:10.2f} {r['bytes'] / 1e9:11.2f}"
        )
    ours, verl, copy = results["ours"], results["verl"], results["copy"]
    print(
        f"\nours / verl time: {ours['seconds'] / verl['seconds']:.2f}x (goal <= 0.5)   "
        f"ours / copy time: {ours['seconds'] / copy['seconds']:.2f}x (goal <= 1.5)   "
        f"ours peak RSS / fp32 model bytes: {ours['peak_rss'] / model_bytes:.2f} (goal <= 1.3; "
        f"{(ours['peak_rss'] - ours['rss_after_imports']) / 1e9:.2f} GB above the interpreter's "
        f"{ours['rss_after_imports'] / 1e9:.2f} GB after imports)"
    )
    print(
        f"ours-fp32 / copy time: {results['ours-fp32']['seconds'] / copy['seconds']:.2f}x   "
        f"bf16 outputs of ours and verl identical: {'yes' if identical else 'NO'}"
    )
    library = results["torch.load"]
    print(
        f"torch.load / ours time: {library['seconds'] / ours['seconds']:.2f}x   "
        f"torch.load / ours peak RSS: {library['peak_rss'] / ours['peak_rss']:.2f}x "
        f"({(library['peak_rss'] - library['rss_after_imports']) / 1e9:.2f} GB above its imports)   "
        f"bf16 outputs of torch.load and ours identical: {'yes' if identical_library else 'NO'}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "rg_verl_bench_convert")
    parser.add_argument("--keep", action="store_true", help="keep the converted outputs")
    parser.add_argument("--repeats", type=int, default=3, help="runs per arm, interleaved; the fastest counts")
    parser.add_argument("--arm", choices=list(ARMS), help=argparse.SUPPRESS)
    parser.add_argument("paths", nargs="*", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.arm:
        child(args.arm, *args.paths)
        return

    args.workdir.mkdir(parents=True, exist_ok=True)
    actor = make_checkpoint(args.workdir)
    shard_bytes = sum(f.stat().st_size for f in actor.glob("model_world_size_*_rank_*.pt"))
    import torch

    n_params, model_bytes = model_size(actor)
    print(
        f"checkpoint: {n_params / 1e6:.0f}M parameters, fp32 model {model_bytes / 1e9:.2f} GB, "
        f"shard files {shard_bytes / 1e9:.2f} GB, {WORLD_SIZE} ranks; {os.cpu_count()} CPUs, torch {torch.__version__}"
    )

    print(f"load average before: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    results: dict[str, dict] = {}
    for _ in range(args.repeats):
        for arm in ("copy", "ours", "verl", "torch.load", "ours-fp32"):
            r = run_arm(arm, actor, args.workdir / f"out-{arm}")
            if arm not in results or r["seconds"] < results[arm]["seconds"]:
                results[arm] = r
    print(f"load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    report(
        results, model_bytes, same_tensors(args.workdir / "out-ours", args.workdir / "out-verl"),
        same_tensors(args.workdir / "out-torch.load", args.workdir / "out-ours"),
    )  # fmt: skip
    if not args.keep:
        for arm in results:
            shutil.rmtree(args.workdir / f"out-{arm}", ignore_errors=True)


if __name__ == "__main__":
    main()
