"""rg-verl's FSDP -> Hugging Face converter against verl's model_merger and the previous converter, ~0.5B parameters.

    python bench/convert.py [--workdir DIR] [--keep] [--repeats 5] [--previous REV]

Saves a randomly initialised Qwen2 with Qwen2.5-0.5B's shapes (494M parameters, tied embeddings) as verl does
(FSDP2 over 2 gloo ranks, ``FSDPCheckpointManager``), reused from ``--workdir``. Then runs, interleaved, each in a
fresh process: ``copy`` (the shard bytes copied and fsync'd: the disk), ``ours`` (``convert_checkpoint`` to bf16),
``ours-300MB`` (the same in 300 MB files), ``verl`` (``FSDPModelMerger.merge_and_save``, always bf16) and
``previous`` (``convert_checkpoint`` of git revision ``--previous``, the hand-written reader and writer). Reports
median time, peak RSS (VmHWM) and peak anonymous memory (RssAnon sampled every 2 ms); checks outputs bit for bit.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORLD_SIZE = 2
MODEL = dict(  # Qwen2.5-0.5B's shapes
    hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
    vocab_size=151936, max_position_embeddings=32768, tie_word_embeddings=True, architectures=["Qwen2ForCausalLM"],
)  # fmt: skip


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


# The arms, each run in a child process: `python bench/convert.py --arm NAME SRC DST`


def arm_copy(src: Path, dst: Path) -> None:
    dst.mkdir(parents=True)
    for f in sorted(src.glob("model_world_size_*_rank_*.pt")):
        shutil.copyfile(f, dst / f.name)
        fd = os.open(dst / f.name, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)


def arm_ours(src: Path, dst: Path, max_shard_size: str = "5GB") -> None:
    from rg_verl.checkpoint import convert_checkpoint

    convert_checkpoint(src, dst, dtype="bf16", max_shard_size=max_shard_size, progress=False)


def arm_verl(src: Path, dst: Path) -> None:
    from verl.model_merger.base_model_merger import ModelMergerConfig
    from verl.model_merger.fsdp_model_merger import FSDPModelMerger

    config = ModelMergerConfig(
        operation="merge", backend="fsdp", local_dir=str(src), target_dir=str(dst),
        hf_model_config_path=str(src / "huggingface"),
    )  # fmt: skip
    merger = FSDPModelMerger(config)
    merger.merge_and_save()
    merger.cleanup()


_OURS = ["rg_verl.checkpoint", "transformers", "safetensors", "tqdm"]
ARMS = {  # name -> (function, modules imported before the clock starts)
    "copy": (arm_copy, []),
    "ours": (arm_ours, _OURS),
    "ours-300MB": (lambda s, d: arm_ours(s, d, "300MB"), _OURS),
    "previous": (arm_ours, _OURS),
    "verl": (arm_verl, ["verl.model_merger.fsdp_model_merger", "transformers", "safetensors", "tqdm"]),
}


def _status(field: str) -> int:
    """A field of /proc/self/status, in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    return 0


def child(arm: str, src: Path, dst: Path) -> None:
    import importlib
    import threading

    import torch  # noqa: F401 - every arm but copy needs it; imported before timing for all

    func, modules = ARMS[arm]
    for m in modules:
        importlib.import_module(m)
    anon_before, peak = _status("RssAnon"), {"anon": 0}

    def watch() -> None:  # the kernel keeps no peak of anonymous memory: sample it
        while True:
            peak["anon"] = max(peak["anon"], _status("RssAnon"))
            time.sleep(0.002)

    threading.Thread(target=watch, daemon=True).start()
    start = time.perf_counter()
    func(src, dst)
    seconds = time.perf_counter() - start
    peak["anon"] = max(peak["anon"], _status("RssAnon"))
    print(json.dumps({"seconds": seconds, "peak_rss": _status("VmHWM"), "peak_anon": peak["anon"],
                      "anon_after_imports": anon_before}))  # fmt: skip


def run_arm(arm: str, src: Path, dst: Path, pythonpath: Path) -> dict:
    shutil.rmtree(dst, ignore_errors=True)
    os.sync()  # each arm starts with no dirty pages left by the one before
    proc = subprocess.run(
        [sys.executable, __file__, "--arm", arm, str(src), str(dst)],
        capture_output=True, text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(pythonpath)},
    )  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"{arm} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def same_tensors(a: Path, b: Path) -> bool:
    from safetensors.torch import load_file

    ta = {k: v for f in sorted(a.glob("*.safetensors")) for k, v in load_file(f).items()}
    tb = {k: v for f in sorted(b.glob("*.safetensors")) for k, v in load_file(f).items()}
    return set(ta) == set(tb) and all(ta[k].dtype == tb[k].dtype and ta[k].equal(tb[k]) for k in ta)


def report(runs: dict[str, list[dict]], model_bytes: int) -> dict[str, dict]:
    """The table of arms (medians over the runs), then the ratios against the goals."""
    med = {arm: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for arm, rs in runs.items()}
    print(f"\n{'arm':<9} {'median s':>9} {'min-max s':>12} {'peak RSS GB':>12} {'peak anon GB':>13} {'anon/model':>11}")
    for arm, m in med.items():
        times = sorted(r["seconds"] for r in runs[arm])
        print(f"{arm:<9} {m['seconds']:9.2f} {times[0]:5.2f}-{times[-1]:<6.2f} {m['peak_rss'] / 1e9:12.2f} "
              f"{m['peak_anon'] / 1e9:13.2f} {m['peak_anon'] / model_bytes:11.2f}")  # fmt: skip
    ours, verl, previous = med["ours"], med["verl"], med["previous"]
    print(
        f"\nours / verl time: {ours['seconds'] / verl['seconds']:.2f}x (goal <= 0.5)   "
        f"ours / previous peak anon: {ours['peak_anon'] / previous['peak_anon']:.2f}x (goal <= 1.15)   "
        f"ours / previous peak RSS: {ours['peak_rss'] / previous['peak_rss']:.2f}x   "
        f"ours / previous time: {ours['seconds'] / previous['seconds']:.2f}x   "
        f"ours / copy time: {ours['seconds'] / med['copy']['seconds']:.2f}x\n"
        f"anonymous memory after imports: ours {ours['anon_after_imports'] / 1e9:.2f} GB, "
        f"previous {previous['anon_after_imports'] / 1e9:.2f} GB"
    )
    return med


def previous_tree(workdir: Path, rev: str) -> Path:
    """``rg_verl/`` at git revision ``rev``, extracted once under ``workdir``; ``rev`` may be a folder holding it."""
    if (Path(rev) / "rg_verl").is_dir():
        return Path(rev)
    sha = subprocess.run(["git", "-C", str(REPO), "rev-parse", rev], capture_output=True, text=True, check=True)
    tree = workdir / f"previous-{sha.stdout.strip()[:12]}"
    if not (tree / "rg_verl").is_dir():
        tree.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "rg_verl"], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    return tree


def model_bytes(actor: Path) -> tuple[int, int]:
    """Parameters and bytes of the checkpoint's model as stored (fp32), the tied lm_head counted once."""
    import math

    from rg_verl.checkpoint.shards import inspect_checkpoint, load_state, sources

    files = inspect_checkpoint(actor).model_files
    unique = [s for s in sources(files, [load_state(f) for f in files]).values() if s.key != "lm_head.weight"]
    return sum(math.prod(s.shape) for s in unique), sum(math.prod(s.shape) * s.dtype.itemsize for s in unique)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "rg_verl_bench_convert")
    parser.add_argument("--keep", action="store_true", help="keep the converted outputs")
    parser.add_argument("--repeats", type=int, default=5, help="runs per arm, interleaved; the median counts")
    parser.add_argument("--previous", default="a182740", help="git revision of the previous converter")
    parser.add_argument("--arm", choices=list(ARMS), help=argparse.SUPPRESS)
    parser.add_argument("paths", nargs="*", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.arm:
        child(args.arm, *args.paths)
        return

    args.workdir.mkdir(parents=True, exist_ok=True)
    actor = make_checkpoint(args.workdir)
    paths = {arm: REPO for arm in ARMS} | {"previous": previous_tree(args.workdir, args.previous)}
    import torch

    n_params, nbytes = model_bytes(actor)
    print(
        f"checkpoint: {n_params / 1e6:.0f}M parameters, fp32 model {nbytes / 1e9:.2f} GB, {WORLD_SIZE} ranks; "
        f"{os.cpu_count()} CPUs, torch {torch.__version__}; load average {os.getloadavg()[0]:.1f}"
    )
    runs: dict[str, list[dict]] = {arm: [] for arm in ARMS}
    for _ in range(args.repeats):
        for arm in ARMS:
            runs[arm].append(run_arm(arm, actor, args.workdir / f"out-{arm}", paths[arm]))
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    report(runs, nbytes)
    out = args.workdir
    print(f"bf16 outputs identical, bit for bit: ours and verl {same_tensors(out / 'out-ours', out / 'out-verl')}, "
          f"ours and previous {same_tensors(out / 'out-ours', out / 'out-previous')}")  # fmt: skip
    if not args.keep:
        for arm in ARMS:
            shutil.rmtree(args.workdir / f"out-{arm}", ignore_errors=True)


if __name__ == "__main__":
    main()
