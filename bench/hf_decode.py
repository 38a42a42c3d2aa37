"""The hf rollout's decoding against transformers' defaults, side by side: one batched ``generate``, three arms."""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from rg_verl.cpu.tiny_model import build_tiny_model
from rg_verl.hf_rollout.attention import attention_for
from rg_verl.hf_rollout.kv_cache import growing_cache_for


def timed_generate(model, ids: torch.Tensor, mask: torch.Tensor, tokens: int, growing: bool):
    torch.manual_seed(0)
    cache = growing_cache_for(model.config) if growing else None
    start = time.perf_counter()
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, past_key_values=cache, max_new_tokens=tokens,
                             min_new_tokens=tokens, do_sample=True, pad_token_id=0)  # fmt: skip
    return time.perf_counter() - start, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--prompt", type=int, default=80, help="prompt tokens of the longest row")
    parser.add_argument("--tokens", type=int, default=144, help="generated tokens a row")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--hidden-size", type=int, default=512)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--intermediate-size", type=int, default=2048)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = build_tiny_model(Path(tmp) / "model", hidden_size=args.hidden_size, num_layers=args.layers,
                                intermediate_size=args.intermediate_size, num_heads=4, num_kv_heads=2)  # fmt: skip
        default = AutoModelForCausalLM.from_pretrained(path, attn_implementation="sdpa").eval()
        rollout = AutoModelForCausalLM.from_pretrained(path, attn_implementation=attention_for(torch.device("cpu")))
    rollout.eval()
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(10, 200, (args.batch, args.prompt), generator=generator)
    mask = torch.ones_like(ids)
    for row in range(args.batch):  # rows of different lengths, left-padded as the rollout batches them
        mask[row, : int(torch.randint(0, args.prompt // 2, (1,), generator=generator))] = 0
    timed_generate(default, ids, mask, 8, growing=False)  # warm-up
    ratios = {"cache": [], "rollout": []}
    for repeat in range(args.repeats):
        t_default, plain = timed_generate(default, ids, mask, args.tokens, growing=False)
        t_cache, growing = timed_generate(default, ids, mask, args.tokens, growing=True)
        t_rollout, _ = timed_generate(rollout, ids, mask, args.tokens, growing=True)
        assert torch.equal(plain, growing), "the two caches gave different tokens"
        ratios["cache"].append(t_cache / t_default)
        ratios["rollout"].append(t_rollout / t_default)
        print(
            f"repeat {repeat + 1}: {args.batch} rows x {args.tokens} tokens from up to {args.prompt}; default "
            f"{t_default:.2f} s, GrowingCache {t_cache:.2f} s, GrowingCache + grouped SDPA {t_rollout:.2f} s"
        )
    for arm, values in ratios.items():
        print(f"{arm} / default: median {statistics.median(values):.3f} (min {min(values):.3f}, max {max(values):.3f})")


if __name__ == "__main__":
    main()
