"""What OREO costs: an OREO step against a verl SFT step, and collection against plain generation."""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("VERL_PLATFORM", "cpu")
os.environ.setdefault("VERL_ENGINE_DEVICE", "cuda")

REPO = Path(__file__).resolve().parents[1]


def _model(root: Path, hidden: int, layers: int) -> Path:
    from rg_verl.cpu.tiny_model import build_tiny_model

    return build_tiny_model(root / "model", hidden_size=hidden, num_layers=layers, intermediate_size=4 * hidden,
                            num_heads=4, num_kv_heads=2)  # fmt: skip


def _trajectories(model: Path, out: Path, batch: int, response: int) -> Path:
    import random

    from transformers import AutoTokenizer

    from rg_verl.oreo.trajectories import shard_name, tokenizer_fingerprint, write_shard

    tokenizer = AutoTokenizer.from_pretrained(model)
    rng = random.Random(0)
    rows = []
    for index in range(batch):
        messages = [{"role": "user", "content": f"What is {index} + {rng.randrange(1000)}? Think step by step."}]
        prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        prompt = prompt if isinstance(prompt, list) else prompt["input_ids"]
        ids = [rng.randrange(10, 900) for _ in range(response - 1)] + [tokenizer.eos_token_id]
        right = float(index % 3 == 0)
        rows.append({
            "uid": f"train/{index}", "split": "train", "index": index, "sample_idx": 0, "data_source": "bench",
            "prompt": "[]", "prompt_ids": prompt, "response": "", "response_ids": ids, "ids_source": "backend",
            "finished": True, "score": right, "accuracy": right,
        })  # fmt: skip
    write_shard(out / "train" / shard_name(0), rows, {"tokenizer_fingerprint": tokenizer_fingerprint(tokenizer)})
    return out


def bench_step(args: argparse.Namespace, root: Path) -> dict[str, float]:
    os.environ.update(WORLD_SIZE="1", RANK="0", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT="29611")
    importlib.import_module("rg_verl.cpu.platform")  # the CPU platform, before verl's engines are imported
    from functools import partial

    from hydra import compose, initialize_config_dir
    from verl.utils import tensordict_utils as tu
    from verl.workers.engine_workers import TrainingWorker, TrainingWorkerConfig
    from verl.workers.utils.losses import sft_loss

    from rg_verl.oreo import checkpoints
    from rg_verl.oreo.config import validate, verl_sections
    from rg_verl.oreo.launch import prepare_process
    from rg_verl.oreo.trainer import OreoTrainer

    model = _model(root, args.hidden, args.layers)
    files = _trajectories(model, root / "trajectories", args.batch, args.response)
    with initialize_config_dir(config_dir=str(REPO / "configs" / "oreo"), version_base=None):
        config = compose("smoke_cpu", overrides=[
            f"actor.model.path={model}", f"data.train_files=[{files / 'train'}]", "data.val_files=[]",
            f"data.train_batch_size={args.batch}", f"data.micro_batch_size_per_gpu={args.micro}",
            f"trainer.default_local_dir={root / 'out'}", "trainer.total_training_steps=1000",
        ])  # fmt: skip
    settings = validate(config)
    prepare_process(config)
    trainer = OreoTrainer(config, settings)
    reference = trainer._reference()

    sections = verl_sections(config.actor)
    sections["optim"].total_training_steps = 1000
    sft = TrainingWorker(TrainingWorkerConfig(
        model_type="language_model", model_config=sections["model"], engine_config=sections["engine"],
        optimizer_config=sections["optim"], checkpoint_config=checkpoints.checkpoint_config(config),
    ))  # fmt: skip
    sft.reset()
    sft.set_loss_fn(partial(sft_loss, config=None))
    items, starts = trainer.train, trainer.train_starts

    def oreo_step() -> float:
        started = time.perf_counter()
        trainer.step(reference)
        return time.perf_counter() - started

    def sft_step() -> float:  # from the trajectories, as the OREO step starts: its batch made, then trained
        started = time.perf_counter()
        batch = trainer._batch(items, starts, global_batch=len(items))
        tu.assign_non_tensor(batch, update_lr_scheduler=True)
        sft.train_batch(batch)
        return time.perf_counter() - started

    oreo_step(), sft_step()  # warm-up
    parts = _parts(trainer, reference) if args.parts else {}
    oreo_times, sft_times = alternate(oreo_step, sft_step, args.steps)
    return {"oreo_s": statistics.median(oreo_times), "sft_s": statistics.median(sft_times),
            **ratios(oreo_times, sft_times), **parts}  # fmt: skip


def alternate(first, second, rounds: int) -> tuple[list[float], list[float]]:
    """The seconds of ``rounds`` calls of each timer, in rounds that alternate which runs first (so neither
    always runs on a warmer or a cooler machine)."""
    a, b = [], []
    for n in range(rounds):
        if n % 2:
            b.append(second()), a.append(first())
        else:
            a.append(first()), b.append(second())
    return a, b


def ratios(a: list[float], b: list[float]) -> dict[str, float]:
    """The median, lowest and highest of the per-round ratios a / b."""
    each = [x / y for x, y in zip(a, b, strict=True)]
    return {"ratio": statistics.median(each), "ratio_min": min(each), "ratio_max": max(each)}


def _parts(trainer, reference) -> dict[str, float]:
    """Seconds of one joint update alone (both models, batch made beforehand), and of the no-grad passes it
    saves: the critic's (which driving verl's ``train_batch`` per model would need) and the actor's (which OREO's
    own trainer runs)."""
    from rg_verl.oreo.joint import joint_update

    _, indices = trainer.plan.step(trainer.global_step)
    items, starts = [trainer.train[i] for i in indices], [trainer.train_starts[i] for i in indices]
    times = {}
    for name, worker, key in (("critic_infer_s", trainer.critic, "values"), ("actor_infer_s", trainer.actor,
                                                                                "log_probs")):  # fmt: skip
        started = time.perf_counter()
        trainer._infer(worker, key, items, starts)
        times[name] = time.perf_counter() - started
    batch = trainer._batch(items, starts, {"ref_log_prob": [reference[i] for i in indices]},
                           global_batch=trainer.settings.data.train_batch_size)  # fmt: skip
    started = time.perf_counter()
    joint_update(trainer.actor, trainer.critic, batch, trainer.policy_loss, trainer.value_loss)
    times["joint_update_s"] = time.perf_counter() - started
    return times


def bench_collect(args: argparse.Namespace, root: Path) -> dict[str, float]:
    from rg_verl.common.compose import compose
    from rg_verl.evaluation.backends import create_backend
    from rg_verl.evaluation.backends.base import Sampling
    from rg_verl.oreo import collect

    overrides = [f"reasoning_gym.train_size={max(args.items, 8)}"]
    config = compose(str(REPO / "configs" / "smoke"), "learn", overrides)
    parser = collect.build_parser()

    def options(out: Path) -> argparse.Namespace:
        return parser.parse_args([
            "--out", str(out), "--samples", str(args.samples), "--train-items", str(args.items),
            "--max-tokens", str(args.max_tokens), "--batch-size", str(args.batch_size),
        ])  # fmt: skip

    model_path = collect._checked(config, options(root / "probe"), build=True)[0]
    settings = collect.BackendSettings(backend="hf", model_path=model_path, batch_size=args.batch_size)
    backend = create_backend(settings)

    def generate_only() -> float:  # as the evaluator does: the dataset, its items' prompts, generation
        started = time.perf_counter()
        dataset = collect._datasets(collect.reasoning_gym_section(config), options(root / "probe"))[0]["train"]
        messages = [dataset[i]["raw_prompt"] for i in range(args.items)]
        for first in range(0, args.items, args.batch_size):
            seed = collect.chunk_seed(42, "train", first)
            sampling = Sampling(args.max_tokens, 1.0, 1.0, seed=seed)
            backend.generate(messages[first : first + args.batch_size], args.samples, sampling)
        return time.perf_counter() - started

    def collection(n: int) -> float:
        started = time.perf_counter()
        collect.collect(config, options(root / f"collect{n}"), backend=backend)
        return time.perf_counter() - started

    runs = iter(range(args.steps + 1))
    generate_only(), collection(next(runs))  # warm-up
    gen, col = alternate(generate_only, lambda: collection(next(runs)), args.steps)
    return {"generate_s": statistics.median(gen), "collect_s": statistics.median(col), **ratios(gen, col)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--part", choices=("step", "collect"), default="step")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--micro", type=int, default=8)
    parser.add_argument("--response", type=int, default=64)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--parts", action="store_true",
                        help="also time the joint update alone and the no-grad passes it saves")  # fmt: skip
    parser.add_argument("--items", type=int, default=32)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="oreo_bench_") as tmp:
        if args.part == "step":
            result = bench_step(args, Path(tmp))
            print(f"OREO step {result['oreo_s']:.3f} s, SFT step {result['sft_s']:.3f} s (medians of {args.steps}); "
                  f"OREO / SFT = {result['ratio']:.2f}x (rounds {result['ratio_min']:.2f}-{result['ratio_max']:.2f}; "
                  f"goal <= 2.2x; hidden {args.hidden}, {args.layers} layers, "
                  f"batch {args.batch}, micro {args.micro}, {args.response} response tokens)")  # fmt: skip
            if args.parts:
                print(
                    "alone: "
                    + ", ".join(
                        f"{k} {v:.2f}" for k, v in result.items() if k.endswith("_s") and k not in ("oreo_s", "sft_s")
                    )
                )
        else:
            result = bench_collect(args, Path(tmp))
            print(f"generation {result['generate_s']:.2f} s, collection {result['collect_s']:.2f} s (medians of "
                  f"{args.steps}); collection / generation throughput = {result['ratio']:.2f}x (rounds "
                  f"{result['ratio_min']:.2f}-{result['ratio_max']:.2f}; goal >= 0.95x; "
                  f"{args.items} items x {args.samples} samples, {args.max_tokens} tokens)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
