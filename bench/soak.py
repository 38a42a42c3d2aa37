"""Soak: the smoke config killed at random steps and resumed each time, against the same run never broken."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from rg_verl.cpu.tiny_model import build_tiny_model

REPO = Path(__file__).resolve().parent.parent
RUN_TIMEOUT_S = 3600
# a run that has not stopped this long after an engine kill or SIGINT has hung
STOP_TIMEOUT_S = 120
# verl's vLLM rollout on the CPU: vLLM's CPU attention takes head size 64, not the tiny model's 16
VLLM_MODEL = {"hidden_size": 128, "num_heads": 2, "num_kv_heads": 1}
VLLM_OVERRIDES = ["actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.rollout.calculate_log_probs=true"]


REWARD_KEY = "critic/score/mean"  # the reward curve's value of a step


def logged_rewards(path: Path) -> dict[int, float]:
    """step -> reward, from verl's file-logger JSONL at ``path`` (a line being written is skipped)."""
    if not path.exists():
        return {}
    rewards = {}
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
            rewards[int(row["step"])] = float(row["data"][REWARD_KEY])
        except (ValueError, KeyError):
            continue
    return rewards


def logged_steps(path: Path) -> list[int]:
    return sorted(logged_rewards(path))


class Arm:
    """One arm's folder and its launches of ``train_grpo.py``."""

    def __init__(self, root: Path, name: str, model: Path, steps: int, save_every: int, extra: list[str]):
        self.dir = root / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.model, self.steps, self.save_every, self.extra = model, steps, save_every, extra
        self.launches = 0
        self.stops: list[float] = []  # seconds from each engine kill or SIGINT to the run's exit

    def launch(self) -> tuple[subprocess.Popen, Path]:
        self.launches += 1
        metrics = self.dir / f"metrics_{self.launches}.jsonl"
        overrides = [f"trainer.default_local_dir={self.dir / 'out'}", "trainer.logger=[console,file]",
                     f"trainer.total_training_steps={self.steps}", f"trainer.save_freq={self.save_every}",
                     "trainer.test_freq=-1", "reasoning_gym.adaptive_weights.enabled=true",
                     # leg_counting's animals one level up every 10 steps: a level the record must carry over
                     "reasoning_gym.curriculum.enabled=true", "reasoning_gym.curriculum.schedule_every=10",
                     "+reasoning_gym.curriculum.levels.leg_counting.num_animals=0", *self.extra]  # fmt: skip
        env = {**os.environ, "RG_VERL_TINY_MODEL": str(self.model), "VERL_FILE_LOGGER_PATH": str(metrics)}
        with open(self.dir / f"run_{self.launches}.log", "w") as log:
            run = subprocess.Popen([sys.executable, str(REPO / "train_grpo.py"), *overrides], cwd=self.dir,
                                   env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        return run, metrics

    def run_to_end(self) -> None:
        run, _ = self.launch()
        try:
            code = run.wait(timeout=RUN_TIMEOUT_S)
        finally:
            kill_group(run)  # Ray's leftover agents share the driver's group
        if code != 0:
            raise SystemExit(f"{self.dir / f'run_{self.launches}.log'}: the run failed (exit {code})")

    def run_and_kill_after(self, step: int, rng: random.Random, fault: str) -> None:
        run, metrics = self.launch()
        log = self.dir / f"run_{self.launches}.log"
        try:
            while run.poll() is None and (logged_steps(metrics) or [0])[-1] < step:
                time.sleep(0.2)
            time.sleep(rng.uniform(0.0, 2.0))
            if run.poll() is not None:
                raise SystemExit(f"{log}: the run ended before its kill (exit {run.returncode})")
            if fault == "group":
                kill_group(run)
            else:
                self.stop_by_itself(run, fault, log)
        finally:
            kill_group(run)
        print(f"  {fault} after step {step} (launch {self.launches}; steps it logged: {logged_steps(metrics)})")

    def stop_by_itself(self, run: subprocess.Popen, fault: str, log: Path) -> None:
        """Kill the run's vLLM engine core (``engine``) or send its driver SIGINT (``sigint``); the run must end by
        itself, non-zero, with every process of its session."""
        if fault == "engine":
            engines = [p for p in session(run.pid) if "VLLM::EngineCore" in " ".join(p.cmdline())]
            if not engines:
                raise SystemExit(f"{log}: no vLLM engine core in the run (--fault engine needs --rollout vllm)")
            for engine in engines:
                engine.kill()
        else:
            os.kill(run.pid, signal.SIGINT)
        faulted = time.monotonic()
        try:
            code = run.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise SystemExit(f"{log}: still running {STOP_TIMEOUT_S} s after the {fault} fault: it hung") from None
        self.stops.append(time.monotonic() - faulted)
        left = session(run.pid)
        if code not in (1, 130) or left:
            raise SystemExit(f"{log}: after the {fault} fault: exit {code}, {len(left)} processes of the run left")

    def final_state(self) -> dict:
        step_dir = self.dir / "out" / f"global_step_{self.steps}"
        data = torch.load(step_dir / "data.pt", weights_only=False)
        actor = torch.load(step_dir / "actor" / "model_world_size_1_rank_0.pt", weights_only=False)
        weights = {name: (t.full_tensor() if hasattr(t, "full_tensor") else t).float() for name, t in actor.items()}
        curve = json.loads((self.dir / "out" / "reward_curve.json").read_text())
        return {"data": data, "weights": weights, "curve": {int(k): v for k, v in curve.items()},
                "kept": self.kept_rewards()}  # fmt: skip

    def kept_rewards(self) -> dict[int, float]:
        """step -> the reward logged by the last launch that trained it (a resume retrains what a kill lost)."""
        kept: dict[int, float] = {}
        for launch in range(1, self.launches + 1):
            kept.update(logged_rewards(self.dir / f"metrics_{launch}.jsonl"))
        return kept


def session(sid: int) -> list:
    """The live processes of the session ``sid`` (a launch: every process of the run, Ray's and vLLM's)."""
    import psutil

    found = []
    for process in psutil.process_iter(["status"]):
        with contextlib.suppress(OSError, psutil.Error):
            if os.getsid(process.pid) == sid and process.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(process)
    return found


def kill_group(run: subprocess.Popen) -> None:
    """SIGKILL every process of the run's session (the driver and every Ray and vLLM process), as a lost job dies."""
    for process in session(run.pid):
        with contextlib.suppress(Exception):
            process.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        run.wait(timeout=60)


def max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max(float((a[name] - b[name]).abs().max()) for name in a)


def compare(killed: dict, unbroken: dict, control: dict, steps: int) -> list[tuple[str, str, str]]:
    """(what, killed vs unbroken, control vs unbroken) rows."""

    def sampler(state):
        it = state["data"]["_sampler_iter_state"]
        return it["samples_yielded"], it["sampler_iter_state"]["generator"]

    def record(state):
        return state["data"]["dataset_state"]

    def same(a, b) -> str:
        return "match" if a == b else "differ"

    def same_order(a, b) -> str:
        return "match" if a[0] == b[0] and torch.equal(a[1], b[1]) else f"differ ({a[0]} vs {b[0]} yielded)"

    def same_values(a: dict, b: dict) -> str:
        return "match" if a.keys() == b.keys() and all(abs(a[k] - b[k]) < 1e-6 for k in a) else "differ"

    def outcomes(state) -> int:
        return sum(len(values) for values in record(state)["results"].values())

    rows = []
    for name, fn in (
        ("data order (sampler position, generator)", lambda s, u: same_order(sampler(s), sampler(u))),
        ("record: steps counted", lambda s, u: same(record(s)["step"], record(u)["step"])),
        ("record: outcomes held", lambda s, u: same(outcomes(s), outcomes(u))),
        ("record: curriculum levels", lambda s, u: same(record(s)["levels"], record(u)["levels"])),
        ("record: adaptive weights", lambda s, u: same(record(s)["weights"], record(u)["weights"])),
        ("reward curve: every step once", lambda s, u: same(sorted(s["curve"]), list(range(1, steps + 1)))),
        ("reward curve: the kept launches' values", lambda s, u: same_values(s["curve"], s["kept"])),
        ("actor weights: max |difference|", lambda s, u: f"{max_diff(s['weights'], u['weights']):.3g}"),
    ):
        rows.append((name, fn(killed, unbroken), fn(control, unbroken)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--save-every", type=int, default=5)
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", type=Path, default=None, help="where the arms run (default: a temporary folder)")
    parser.add_argument("--rollout", choices=("hf", "vllm"), default="hf")
    parser.add_argument("--fault", choices=("group", "engine", "sigint"), default="group")
    args = parser.parse_args()
    if args.fault == "engine" and args.rollout != "vllm":
        parser.error("--fault engine kills vLLM's engine core: add --rollout vllm")
    root = args.workdir or Path(tempfile.mkdtemp(prefix="rg_verl_soak_"))
    vllm = args.rollout == "vllm"
    model = build_tiny_model(root / "model", **(VLLM_MODEL if vllm else {}))
    rng = random.Random(args.seed)
    kill_steps = sorted(rng.sample(range(1, args.steps), args.kills))
    extra = VLLM_OVERRIDES if vllm else []
    arms = {name: Arm(root, name, model, args.steps, args.save_every, extra)
            for name in ("killed", "unbroken", "control")}  # fmt: skip
    print(f"soak in {root}: {args.steps} steps on the {args.rollout} rollout, a checkpoint every {args.save_every}, "
          f"{args.fault} faults after steps {kill_steps}")  # fmt: skip
    started = time.monotonic()
    for step in kill_steps:
        arms["killed"].run_and_kill_after(step, rng, args.fault)
    arms["killed"].run_to_end()
    arms["unbroken"].run_to_end()
    arms["control"].run_to_end()
    print(f"killed arm: {arms['killed'].launches} launches")
    if arms["killed"].stops:
        stops = ", ".join(f"{seconds:.1f}" for seconds in arms["killed"].stops)
        print(f"seconds from each {args.fault} fault to the run's own exit: {stops}")
    states = {name: arm.final_state() for name, arm in arms.items()}
    rows = compare(states["killed"], states["unbroken"], states["control"], args.steps)
    width = max(len(row[0]) for row in rows)
    print(f"\n{'at step ' + str(args.steps):<{width}}  killed vs unbroken  control vs unbroken")
    for what, killed, control in rows:
        print(f"{what:<{width}}  {killed:<18}  {control}")
    print(f"\n{time.monotonic() - started:.0f} s in all")


if __name__ == "__main__":
    main()
