"""The cost of "wrong, try again" episodes against single-turn generation of the same tokens, same rollout."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from omegaconf import OmegaConf
from reasoning_gym.factory import create_dataset
from transformers import AutoTokenizer
from verl.experimental.agent_loop.agent_loop import DictConfigWrap
from verl.plugin.platform import set_platform
from verl.workers.rollout.replica import TokenOutput

from rg_verl.cpu.platform import PlatformCPU
from rg_verl.cpu.tiny_model import build_tiny_model
from rg_verl.hf_rollout.server import HFRolloutServer
from rg_verl.retry.agent_loop import RetryAgentLoop
from rg_verl.retry.episode import RetryConfig


def items(count: int) -> list[dict]:
    entries = create_dataset("chain_sum", size=count, seed=11, min_terms=2, max_terms=3)
    return [
        {"raw_prompt": [{"role": "user", "content": e["question"]}], "data_source": "reasoning_gym/chain_sum",
         "reward_model": {"ground_truth": e["answer"]}, "extra_info": {"entry": e}}
        for e in entries
    ]  # fmt: skip


def unreachable_eos(model_dir: Path) -> None:
    """Point the model's end-of-sequence id just past its vocabulary, where no logit is: it is never sampled."""
    vocab_size = json.loads((model_dir / "config.json").read_text())["vocab_size"]
    for name in ("config.json", "generation_config.json"):
        path = model_dir / name
        config = json.loads(path.read_text())
        config["eos_token_id"] = vocab_size
        path.write_text(json.dumps(config))


class VLLMEngine:
    """vLLM's ``AsyncLLM`` with prefix caching, behind the ``generate`` of verl's vLLM rollout server."""

    def __init__(self, model_dir: Path, max_model_len: int, max_num_seqs: int):
        from rg_verl.common.vllm_engine import ENGINE_KWARGS, engine_env

        os.environ.update(engine_env())
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        args = AsyncEngineArgs(model=str(model_dir), enable_prefix_caching=True, max_model_len=max_model_len,
                               max_num_seqs=max_num_seqs, seed=0, **ENGINE_KWARGS)  # fmt: skip
        self.engine = AsyncLLM.from_engine_args(args)

    async def generate(self, prompt_ids, sampling_params, request_id, **_) -> TokenOutput:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params = SamplingParams(**sampling_params, logprobs=0, ignore_eos=True)
        outputs = [o async for o in self.engine.generate(TokensPrompt(prompt_token_ids=list(prompt_ids)), params,
                                                         request_id)]  # fmt: skip
        out = outputs[-1].outputs[0]  # the finished request
        log_probs = [entry[token].logprob for entry, token in zip(out.logprobs, out.token_ids, strict=True)]
        return TokenOutput(token_ids=list(out.token_ids), log_probs=log_probs)


class Arms:
    def __init__(self, model_dir: Path, prompts: int, turns: int, tokens: int, rollout: str = "hf"):
        self.turns, self.tokens, self.items = turns, tokens, items(prompts)
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        if rollout == "vllm":
            self.server = VLLMEngine(model_dir, max_model_len=1024 + turns * tokens + 256, max_num_seqs=prompts)
        else:
            self.server = HFRolloutServer(str(model_dir), prompt_length=1024, response_length=turns * tokens + 256,
                                          max_num_seqs=prompts, seed=0)  # fmt: skip
        self.config = OmegaConf.create({
            "actor_rollout_ref": {"rollout": {"prompt_length": 1024, "response_length": turns * tokens + 256}},
            "reward": {"custom_reward_function": {"reward_kwargs": {"mode": "lenient"}}},
            "retry": {"max_turns": turns}, "data": {},
        })  # fmt: skip

    async def episodes(self) -> int:
        loops = [RetryAgentLoop(trainer_config=DictConfigWrap(self.config), server_manager=self.server,
                                tokenizer=self.tokenizer, processor=None, dataset_cls=None,
                                data_config=DictConfigWrap(self.config.data), hf_model_type="qwen2")
                 for _ in self.items]  # fmt: skip
        params = {"temperature": 1.0, "top_p": 1.0, "max_tokens": self.tokens}
        runs = (loop.run(params, **item) for loop, item in zip(loops, self.items, strict=True))
        outputs = await asyncio.gather(*runs)
        tries = [len(o.extra_fields["retry"]["turn_accuracy"]) for o in outputs]
        assert tries == [self.turns] * len(outputs), f"an episode ended early: {tries}"
        return sum(sum(o.response_mask) for o in outputs)

    async def same_calls(self) -> int:
        """The episodes' generate calls without the agent loop: each round appends the tries' tokens and the
        feedback turn's tokens itself, so only the loop's own work (judging, merging) is missing."""
        contexts = self.prompt_ids()
        feedback = self.feedback_ids()
        params = {"temperature": 1.0, "top_p": 1.0, "max_tokens": self.tokens}
        generated = 0
        for turn in range(self.turns):
            outputs = await asyncio.gather(*(self.server.generate(c, params, request_id=f"{turn}-{i}")
                                             for i, c in enumerate(contexts)))  # fmt: skip
            generated += sum(len(o.token_ids) for o in outputs)
            contexts = [[*c, *o.token_ids, *feedback] for c, o in zip(contexts, outputs, strict=True)]
        return generated

    def prompt_ids(self) -> list[list[int]]:
        return [self.tokenizer.apply_chat_template(item["raw_prompt"], add_generation_prompt=True, tokenize=True,
                                                   return_dict=False) for item in self.items]  # fmt: skip

    def feedback_ids(self) -> list[int]:
        """The tokens the chat template puts between an answer and the next try: the end of the answer's turn, the
        feedback turn, and the next assistant turn's opening."""
        turns = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
        before = self.tokenizer.apply_chat_template(turns, tokenize=False)
        after = self.tokenizer.apply_chat_template([*turns, {"role": "user", "content": RetryConfig().feedback}],
                                                   add_generation_prompt=True, tokenize=False)  # fmt: skip
        return self.tokenizer.encode(after[len(before) :], add_special_tokens=False)

    async def single(self) -> int:
        prompts = self.prompt_ids()
        params = {"temperature": 1.0, "top_p": 1.0, "max_tokens": self.turns * self.tokens}
        outputs = await asyncio.gather(*(self.server.generate(p, params, request_id=str(i))
                                         for i, p in enumerate(prompts)))  # fmt: skip
        return sum(len(o.token_ids) for o in outputs)


# one event loop for every arm: vLLM's engine keeps its output handler on the loop of its first request
LOOP = asyncio.new_event_loop()


def timed(arm) -> tuple[float, int]:
    start = time.perf_counter()
    tokens = LOOP.run_until_complete(arm())
    return time.perf_counter() - start, tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=48, help="tokens of each try")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--hidden-size", type=int, default=128, help="the tiny Qwen2's width")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--intermediate-size", type=int, default=128, help="the MLP's width")
    parser.add_argument("--rollout", choices=("hf", "vllm"), default="hf", help="the rollout server (default: hf)")
    args = parser.parse_args()
    set_platform(PlatformCPU())  # the CPU path's platform, as a CPU training run loads it
    # vLLM's CPU attention takes head size 64, not the hf arm's 32
    heads = {"num_heads": args.hidden_size // 64, "num_kv_heads": 1} if args.rollout == "vllm" else {}
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_tiny_model(Path(tmp) / "model", hidden_size=args.hidden_size, num_layers=args.layers,
                                     intermediate_size=args.intermediate_size, **heads)  # fmt: skip
        unreachable_eos(model_dir)
        arms = Arms(model_dir, args.prompts, args.turns, args.tokens, args.rollout)
        timed(arms.single)  # warm-up: the first generate call pays one-off costs
        ratios, loop_ratios = [], []
        for repeat in range(args.repeats):
            (t_single, n_single), (t_calls, n_calls) = timed(arms.single), timed(arms.same_calls)
            t_episodes, n_episodes = timed(arms.episodes)
            assert n_single == n_calls == n_episodes, (n_single, n_calls, n_episodes)
            ratios.append(t_episodes / t_single)
            loop_ratios.append(t_episodes / t_calls)
            print(f"repeat {repeat + 1}: {args.prompts} prompts, {n_single} generated tokens per arm; single turn "
                  f"{t_single:.2f} s, the episodes' calls alone {t_calls:.2f} s, {args.turns}-try episodes "
                  f"{t_episodes:.2f} s")
    print(f"rollout: {args.rollout}")
    print(f"episodes / single turn, same tokens: median {statistics.median(ratios):.3f} "
          f"(min {min(ratios):.3f}, max {max(ratios):.3f}); goal <= 1.1")
    print(f"episodes / their generate calls alone (the agent loop's own cost): median "
          f"{statistics.median(loop_ratios):.3f} (min {min(loop_ratios):.3f}, max {max(loop_ratios):.3f})")


if __name__ == "__main__":
    main()
