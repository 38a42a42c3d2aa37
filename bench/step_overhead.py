"""Per-step overhead of rg-verl's dataset and reward against verl's stock pieces."""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ARMS = ("ours", "stock")


def constant_reward(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """The stock arm's reward: does no work at all."""
    return 0.0


def compose_config():
    """The smoke config, composed the way ``train_grpo.py`` composes it."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(REPO / "configs" / "smoke"), version_base=None):
        return compose(config_name="cpu")


def write_parquet(dataset, path: Path) -> None:
    """Writes every item of ``dataset`` as a row in the format verl's RLHFDataset reads."""
    import pandas as pd

    rows = []
    for i in range(len(dataset)):
        item = dataset[i]
        # the reasoning-gym entry varies in shape across tasks: store it as JSON text
        extra = {**item["extra_info"], "entry": json.dumps(item["extra_info"]["entry"])}
        rows.append(
            {
                "prompt": item["raw_prompt"],
                "data_source": item["data_source"],
                "reward_model": item["reward_model"],
                "extra_info": extra,
            }
        )
    pd.DataFrame(rows).to_parquet(path)


# the tiny model's sizes for vLLM's CPU attention (head size 64), and where a vllm run builds it
HEAD64 = {"hidden_size": 128, "num_heads": 2, "num_kv_heads": 1}


def rollout_overrides(rollout: str, workdir: Path) -> list[str]:
    """The overrides of both arms for ``rollout`` (hf: none)."""
    if rollout == "hf":
        return []
    sizes = [f"+tiny_model.{key}={value}" for key, value in HEAD64.items()]
    return ["actor_rollout_ref.rollout.name=vllm", f"actor_rollout_ref.model.path={workdir / 'tiny64'}", *sizes]


def prepare_data(config, workdir: Path, sizes: dict | None = None):
    """Writes train/val parquet files; returns (our train dataset, stock train dataset, paths)."""
    from transformers import AutoTokenizer
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from rg_verl.cpu.tiny_model import ensure_tiny_model
    from rg_verl.data.dataset import ReasoningGymDataset

    paths = {}
    for split in ("train", "val"):
        paths[split] = workdir / f"{split}.parquet"
        write_parquet(ReasoningGymDataset(f"reasoning_gym://{split}", config=config.data), paths[split])
    ensure_tiny_model(config.actor_rollout_ref.model.path, **(sizes or {}))
    tokenizer = AutoTokenizer.from_pretrained(config.actor_rollout_ref.model.path)
    ours = ReasoningGymDataset("reasoning_gym://train", tokenizer=tokenizer, config=config.data)
    stock = RLHFDataset(str(paths["train"]), tokenizer=tokenizer, config=config.data)
    assert len(ours) == len(stock), (len(ours), len(stock))
    return ours, stock, paths


def per_call_us(fn, args_list, min_calls: int) -> float:
    """Mean microseconds per ``fn(*args)``, cycling through ``args_list`` ``min_calls`` times or more."""
    fn(*args_list[0])  # warm caches (e.g. the scorer built once per task)
    rounds = max(1, -(-min_calls // len(args_list)))
    start = time.perf_counter()
    for _ in range(rounds):
        for args in args_list:
            fn(*args)
    return (time.perf_counter() - start) / (rounds * len(args_list)) * 1e6


def micro_benchmarks(ours, stock, calls: int) -> list[tuple[str, float, float]]:
    """(what, ours us/call, stock us/call) for dataset items and reward calls."""
    from rg_verl.common.names import formatted
    from rg_verl.reward import compute_score

    indices = [(i,) for i in range(len(ours))]
    rows = [("dataset __getitem__", per_call_us(ours.__getitem__, indices, calls),
             per_call_us(stock.__getitem__, indices, calls))]  # fmt: skip
    reward_args = []
    for i in range(len(ours)):
        item = ours[i]
        truth = item["reward_model"]["ground_truth"]
        answer = truth if i % 2 else "wrong"  # half right, half wrong
        response = formatted("some reasoning", answer)
        reward_args.append((item["data_source"], response, truth, item["extra_info"]))
    rows.append(("reward call", per_call_us(compute_score, reward_args, calls),
                 per_call_us(constant_reward, reward_args, calls)))  # fmt: skip
    return rows


def arm_overrides(arm: str, paths: dict) -> list[str]:
    if arm == "ours":
        return []
    return [
        "data.custom_cls.path=null",
        "data.custom_cls.name=null",
        f"data.train_files={paths['train']}",
        f"data.val_files={paths['val']}",
        f"reward.custom_reward_function.path={Path(__file__).resolve()}",
        "reward.custom_reward_function.name=constant_reward",
    ]


def train_step_times(arm: str, run: int, steps: int, paths: dict, workdir: Path, extra: list[str]) -> list[float]:
    """Runs one training of ``steps`` steps; returns ``timing_s/step`` for each step, in order."""
    from rg_verl.grpo.reward_curve import read_metrics

    rundir = workdir / f"{arm}_{run}"
    rundir.mkdir()
    metrics = rundir / "metrics.jsonl"
    cmd = [
        sys.executable, str(REPO / "train_grpo.py"),
        f"trainer.total_training_steps={steps}", "trainer.save_freq=-1", "trainer.test_freq=-1",
        "trainer.val_before_train=false", "trainer.logger=[console,file]", "data.seed=1",
        f"trainer.default_local_dir={rundir / 'ckpt'}", f"trainer.experiment_name=bench_{arm}_{run}",
        *arm_overrides(arm, paths), *extra,
    ]  # fmt: skip
    env = {**os.environ, "VERL_FILE_LOGGER_PATH": str(metrics)}
    proc = subprocess.run(cmd, cwd=rundir, env=env, capture_output=True, text=True)
    (rundir / "log.txt").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise RuntimeError(f"{arm} run {run} failed (rc {proc.returncode}):\n{(proc.stdout + proc.stderr)[-4000:]}")
    by_step = read_metrics(metrics)
    return [by_step[s]["timing_s/step"] for s in sorted(by_step) if "timing_s/step" in by_step[s]]


def report(runs: dict, micro: list, steps: int, wall: dict) -> None:
    print(f"\n== step time, timing_s/step, first step dropped ({steps} steps per run) ==")
    print(f"{'run':<12}{'steps':>6}{'mean s':>9}{'median s':>10}{'min s':>8}{'wall s':>8}")
    for name, times in runs.items():
        kept = times[1:]
        print(f"{name:<12}{len(kept):>6}{statistics.mean(kept):>9.3f}{statistics.median(kept):>10.3f}"
              f"{min(kept):>8.3f}{wall[name]:>8.1f}")  # fmt: skip
    pooled = {arm: [t for name, ts in runs.items() if name.startswith(arm) for t in ts[1:]] for arm in ARMS}
    for arm, kept in pooled.items():
        print(f"{arm + ' (all)':<12}{len(kept):>6}{statistics.mean(kept):>9.3f}{statistics.median(kept):>10.3f}"
              f"{min(kept):>8.3f}")  # fmt: skip
    print("\n== in-process micro-benchmarks (microseconds per call) ==")
    print(f"{'what':<22}{'ours':>10}{'stock':>10}{'ratio':>9}")
    for what, ours_us, stock_us in micro:
        print(f"{what:<22}{ours_us:>10.2f}{stock_us:>10.2f}{ours_us / stock_us:>9.2f}")
    mean_ratio = statistics.mean(pooled["ours"]) / statistics.mean(pooled["stock"])
    median_ratio = statistics.median(pooled["ours"]) / statistics.median(pooled["stock"])
    print(f"\nstep_overhead ratio (ours/stock, mean step time): {mean_ratio:.2f}")
    print(f"step_overhead ratio (ours/stock, median step time): {median_ratio:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6, help="training steps per run (the first is dropped)")
    parser.add_argument("--repeats", type=int, default=1, help="(ours, stock) pairs of runs")
    parser.add_argument("--calls", type=int, default=2000, help="calls per micro-benchmark")
    parser.add_argument("--workdir", type=Path, default=None, help="keep data, logs and metrics here")
    parser.add_argument("--rollout", choices=("hf", "vllm"), default="hf", help="both arms' rollout (default: hf)")
    args = parser.parse_args()
    if args.steps < 2:
        parser.error("--steps must be at least 2 (the first step is dropped)")

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="rg_verl_bench_"))
    workdir.mkdir(parents=True, exist_ok=True)
    config = compose_config()
    extra = rollout_overrides(args.rollout, workdir)
    if args.rollout == "vllm":
        config.actor_rollout_ref.model.path = str(workdir / "tiny64")
    ours, stock, paths = prepare_data(config, workdir, HEAD64 if args.rollout == "vllm" else None)
    micro = micro_benchmarks(ours, stock, args.calls)

    runs, wall = {}, {}
    for run in range(args.repeats):
        for arm in ARMS:
            name = f"{arm}_{run}"
            print(f"running {name} ({args.steps} steps) ...", flush=True)
            start = time.perf_counter()
            runs[name] = train_step_times(arm, run, args.steps, paths, workdir, extra)
            wall[name] = time.perf_counter() - start
            if len(runs[name]) != args.steps:
                raise RuntimeError(f"{name}: expected {args.steps} step timings, got {len(runs[name])}")
    print(f"rollout: {args.rollout}")
    report(runs, micro, args.steps, wall)
    print(f"(data, logs and metrics in {workdir})")


if __name__ == "__main__":
    main()
