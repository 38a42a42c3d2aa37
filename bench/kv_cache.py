"""The hf rollout's GrowingCache against transformers' DynamicCache, side by side: one batched ``generate``.

    python bench/kv_cache.py [--batch 16] [--prompt 80] [--tokens 144] [--repeats 3]
                             [--hidden-size 512] [--layers 8] [--intermediate-size 2048]

Both arms sample the same number of tokens (``min_new_tokens``) from the same prompts with the same seed, on one
tiny Qwen2, alternating; the tokens must come out identical. DynamicCache copies every layer's whole cache at each
step (``torch.cat``); GrowingCache writes into room it set aside. The ratio is GrowingCache's time over
DynamicCache's, per repeat (the median is the result); below 1 is faster.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from rg_verl.hf_rollout.kv_cache import growing_cache_for
from rg_verl.tiny_model import build_tiny_model


def timed_generate(model, ids: torch.Tensor, tokens: int, growing: bool) -> tuple[float, torch.Tensor]:
    torch.manual_seed(0)
    cache = growing_cache_for(model.config) if growing else None
    start = time.perf_counter()
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), past_key_values=cache,
                             max_new_tokens=tokens, min_new_tokens=tokens, do_sample=True, pad_token_id=0)  # fmt: skip
    return time.perf_counter() - start, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--prompt", type=int, default=80, help="prompt tokens a row")
    parser.add_argument("--tokens", type=int, default=144, help="generated tokens a row")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--hidden-size", type=int, default=512)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--intermediate-size", type=int, default=2048)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = build_tiny_model(Path(tmp) / "model", hidden_size=args.hidden_size, num_layers=args.layers,
                                intermediate_size=args.intermediate_size)  # fmt: skip
        model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="sdpa").eval()
    ids = torch.randint(10, 200, (args.batch, args.prompt), generator=torch.Generator().manual_seed(0))
    timed_generate(model, ids, 8, growing=False)  # warm-up
    ratios = []
    for repeat in range(args.repeats):
        t_dynamic, dynamic = timed_generate(model, ids, args.tokens, growing=False)
        t_growing, growing = timed_generate(model, ids, args.tokens, growing=True)
        assert torch.equal(dynamic, growing), "the two caches gave different tokens"
        ratios.append(t_growing / t_dynamic)
        print(f"repeat {repeat + 1}: {args.batch} rows x {args.tokens} tokens from {args.prompt}; "
              f"DynamicCache {t_dynamic:.2f} s, GrowingCache {t_growing:.2f} s")  # fmt: skip
    print(
        f"GrowingCache / DynamicCache: median {statistics.median(ratios):.3f} "
        f"(min {min(ratios):.3f}, max {max(ratios):.3f})"
    )


if __name__ == "__main__":
    main()
