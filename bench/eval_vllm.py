"""The evaluator's ``vllm`` backend against plain ``vllm.LLM.generate`` of the same prompts and token budget."""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from types import SimpleNamespace


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-path", help="a local model folder (default: a fresh tiny model of head size 64)")
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=4, help="samples per prompt (the evaluator's eval_repeats)")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    return parser.parse_args()


def arms(backend, args) -> dict:
    """The two arms, each a call that generates and returns how many tokens it generated."""
    from reasoning_gym.factory import create_dataset
    from vllm import SamplingParams

    from rg_verl.evaluation.backends.base import Sampling
    from rg_verl.evaluation.backends.hf import prompt_token_ids
    from rg_verl.evaluation.backends.vllm import request_seed

    dataset = create_dataset("chain_sum", size=args.prompts, seed=1)
    prompts = [[{"role": "user", "content": item["question"]}] for item in dataset]
    tokenizer = backend.llm.get_tokenizer()
    token_prompts = [{"prompt_token_ids": prompt_token_ids(tokenizer, p)} for p in prompts]
    sampling = Sampling(max_tokens=args.max_tokens, temperature=1.0, top_p=1.0, seed=5)
    params = [
        SamplingParams(n=args.repeats, temperature=1.0, top_p=1.0, max_tokens=args.max_tokens,
                       seed=request_seed(5, i))
        for i in range(len(prompts))
    ]  # fmt: skip

    def run_backend() -> int:
        return sum(c.num_tokens for out in backend.generate(prompts, args.repeats, sampling) for c in out)

    def run_plain() -> int:
        outputs = backend.llm.generate(token_prompts, params, use_tqdm=False)
        return sum(len(o.token_ids) for out in outputs for o in out.outputs)

    return {"backend": run_backend, "plain": run_plain}


def main() -> None:
    args = parse_args()
    from rg_verl.cpu.tiny_model import build_tiny_model
    from rg_verl.evaluation.backends.vllm import VLLMBackend

    model = args.model_path or str(
        build_tiny_model(tempfile.mkdtemp() + "/tiny64", hidden_size=128, num_heads=2, num_kv_heads=1)
    )
    config = SimpleNamespace(model_path=model, dtype="auto", device="auto", engine_kwargs={}, chat_template_kwargs={})
    backend = VLLMBackend(config)
    runs = arms(backend, args)
    for fn in runs.values():  # warm-up
        fn()
    ratios, times = [], {name: [] for name in runs}
    for _ in range(args.rounds):
        took, tokens = {}, {}
        for name, fn in runs.items():
            start = time.perf_counter()
            tokens[name] = fn()
            took[name] = time.perf_counter() - start
            times[name].append(took[name])
        if tokens["backend"] != tokens["plain"]:
            raise SystemExit(f"the arms generated {tokens['backend']} and {tokens['plain']} tokens: not comparable")
        ratios.append(took["backend"] / took["plain"])
    print(f"{args.prompts} prompts x {args.repeats} samples x up to {args.max_tokens} tokens ({tokens['plain']} "
          f"generated per arm), {args.rounds} rounds")  # fmt: skip
    for name, ts in times.items():
        print(f"{name:<8} median {statistics.median(ts):.3f} s  min {min(ts):.3f} s")
    print(
        f"eval_vllm ratio (backend/plain, median of rounds): {statistics.median(ratios):.3f} "
        f"(rounds {min(ratios):.3f}-{max(ratios):.3f}); goal <= 1.05"
    )
    backend.close()


if __name__ == "__main__":
    main()
