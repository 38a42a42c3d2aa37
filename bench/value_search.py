"""What value-guided search costs: ``value_beam`` against plain sampling of as many tokens, one backend."""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _backend(root: Path, args: argparse.Namespace):
    from rg_verl.cpu.tiny_model import build_tiny_model
    from rg_verl.evaluation.backends import create_backend
    from rg_verl.evaluation.config import parse_config
    from rg_verl.oreo.value_init import prepare_value_model

    model = build_tiny_model(root / "model", hidden_size=args.hidden, num_layers=args.layers,
                             intermediate_size=4 * args.hidden, num_heads=4, num_kv_heads=2)  # fmt: skip
    value = prepare_value_model(str(model), root / "value", zero_head=False)
    config = parse_config({
        "model_path": str(model), "backend": "hf", "device": "cpu", "batch_size": args.problems,
        "max_tokens": args.max_steps * args.step_tokens, "temperature": 1.0, "top_p": 1.0, "eval_repeats": 1,
        "developer_prompt": "default",
        "categories": [{"category": "arithmetic", "datasets": [{"dataset": "chain_sum", "size": args.problems}]}],
        "decoding": {"mode": "value_beam", "value_model": str(value), "beam_width": args.beam_width,
                     "max_steps": args.max_steps, "step_max_tokens": args.step_tokens, "seed": 0},
    })  # fmt: skip
    return config, create_backend(config)


def compare(args: argparse.Namespace, root: Path) -> dict[str, float]:
    from rg_verl.evaluation.backends import Sampling
    from rg_verl.evaluation.backends.hf import HFBackend
    from rg_verl.evaluation.items import eval_datasets, prompt_messages

    config, backend = _backend(root, args)
    (dataset,) = eval_datasets(config)
    prompts = [prompt_messages(dataset[i], config) for i in range(len(dataset))]
    beam_sampling = Sampling(config.max_tokens, 1.0, 1.0, seed=1)
    backend.generate(prompts, 1, beam_sampling)  # warm-up, and the search's size
    made = dict(backend.searched)
    per_problem = args.beam_width**2
    budget = max(1, math.ceil(made["tokens"] / (per_problem * len(prompts))))
    plain = Sampling(budget, 1.0, 1.0, seed=1)
    sampled_tokens = []

    def search() -> float:
        started = time.perf_counter()
        backend.generate(prompts, 1, beam_sampling)
        return time.perf_counter() - started

    def sample() -> float:
        started = time.perf_counter()
        outputs = HFBackend.generate(backend, prompts, per_problem, plain)
        seconds = time.perf_counter() - started
        sampled_tokens.append(sum(c.num_tokens for out in outputs for c in out))
        return seconds

    sample()  # warm-up
    searches, samples = [], []
    for n in range(args.rounds):
        if n % 2:
            samples.append(sample()), searches.append(search())
        else:
            searches.append(search()), samples.append(sample())
    ratios = [a / b for a, b in zip(searches, samples, strict=True)]
    return {
        "search_s": statistics.median(searches), "sample_s": statistics.median(samples),
        "ratio": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
        "continuations": made["continuations"], "search_tokens": made["tokens"], "samples": per_problem * len(prompts),
        "sample_tokens": statistics.median(sampled_tokens), "budget": budget,
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--problems", type=int, default=8)
    parser.add_argument("--beam-width", type=int, default=3)
    parser.add_argument("--max-steps", type=int, default=4)
    parser.add_argument("--step-tokens", type=int, default=16)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="value_search_bench_") as tmp:
        r = compare(args, Path(tmp))
    print(f"value_beam {r['search_s']:.2f} s ({r['continuations']} continuations, {r['search_tokens']} tokens); "
          f"sampling {r['sample_s']:.2f} s ({r['samples']} samples of <= {r['budget']} tokens, "
          f"{r['sample_tokens']:.0f} tokens) (medians of {args.rounds}); value_beam / sampling = {r['ratio']:.2f}x "
          f"(rounds {r['ratio_min']:.2f}-{r['ratio_max']:.2f}; goal <= 1.3x; {args.problems} problems, "
          f"B {args.beam_width}, {args.max_steps} steps of <= {args.step_tokens} tokens)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
