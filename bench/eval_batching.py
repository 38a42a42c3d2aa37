"""Batched against one-prompt-at-a-time generation, side by side, same prompts and settings."""

from __future__ import annotations

import argparse
import importlib.util
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from rg_verl.evaluation.backends import BACKENDS, Sampling
from rg_verl.evaluation.config import parse_config
from rg_verl.evaluation.items import eval_datasets, prompt_messages

__all__ = ["compare_batching", "main"]


def _config(model_path: str, backend: str, batch_size: int, num_prompts: int, device: str):
    return parse_config(
        {
            "model_path": model_path,
            "backend": backend,
            "batch_size": batch_size,
            "device": device,
            "developer_prompt": "default",
            "categories": [{"category": "arithmetic", "datasets": [{"dataset": "chain_sum", "size": num_prompts}]}],
        }
    )


def _timed_generate(backend, prompts, sampling, one_call: bool) -> tuple[float, int]:
    start = time.perf_counter()
    if one_call:
        outputs = backend.generate(prompts, 1, sampling)
    else:
        outputs = [out for p in prompts for out in backend.generate([p], 1, sampling)]
    seconds = time.perf_counter() - start
    return seconds, sum(c.num_tokens or 0 for out in outputs for c in out)


def compare_batching(
    model_path: str,
    backend: str = "hf",
    num_prompts: int = 32,
    batch_size: int = 32,
    max_tokens: int = 32,
    device: str = "auto",
) -> dict[str, float]:
    """Times the same prompts through ``backend`` one at a time and batched."""
    config = _config(model_path, backend, batch_size, num_prompts, device)
    (dataset,) = eval_datasets(config)
    prompts = [prompt_messages(dataset[i], config) for i in range(len(dataset))]
    sampling = Sampling(max_tokens=max_tokens, temperature=0.0, top_p=1.0)
    engine = BACKENDS[backend](config)
    try:
        engine.generate(prompts[:1], 1, sampling)  # warm-up
        if backend == "hf":
            engine.batch_size = 1
            single, single_tokens = _timed_generate(engine, prompts, sampling, one_call=True)
            engine.batch_size = batch_size
        else:
            single, single_tokens = _timed_generate(engine, prompts, sampling, one_call=False)
        batched, batched_tokens = _timed_generate(engine, prompts, sampling, one_call=True)
    finally:
        engine.close()
    return {
        "prompts": num_prompts,
        "one_at_a_time_s": single,
        "batched_s": batched,
        "speedup": single / batched,
        "one_at_a_time_tokens_per_s": single_tokens / single,
        "batched_tokens_per_s": batched_tokens / batched,
    }


def _report(name: str, result: dict[str, float]) -> str:
    return (
        f"{name:5s} {result['prompts']:4d} prompts | one at a time {result['one_at_a_time_s']:7.2f} s "
        f"({result['one_at_a_time_tokens_per_s']:8.1f} tok/s) | batched {result['batched_s']:7.2f} s "
        f"({result['batched_tokens_per_s']:8.1f} tok/s) | speed-up {result['speedup']:.1f}x"
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-path", help="a local model folder (default: a fresh tiny model)")
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=32, help="hf: prompts per generate call when batched")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--device", default="auto", help="hf: auto, cpu, cuda")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        model_path = args.model_path
        if model_path is None:
            from rg_verl.cpu.tiny_model import build_tiny_model

            model_path = str(build_tiny_model(Path(tmp) / "tiny"))
        common = {"num_prompts": args.prompts, "max_tokens": args.max_tokens}
        hf = compare_batching(model_path, "hf", batch_size=args.batch_size, device=args.device, **common)
        print(_report("hf", hf))
        try:
            import torch

            has_gpu = torch.cuda.is_available()
        except ImportError:
            has_gpu = False
        if importlib.util.find_spec("vllm") is None:
            print("vllm  skipped: vllm is not installed here")
        elif not has_gpu:
            print("vllm  skipped: no GPU here")
        else:
            print(_report("vllm", compare_batching(model_path, "vllm", **common)))


if __name__ == "__main__":
    main()
