"""What holding questions out costs: the old split rule against today's, side by side, per shipped config."""

from __future__ import annotations

import argparse
import bisect
import contextlib
import dataclasses
import itertools
import os
import random
import shlex
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import torch
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig
from reasoning_gym.factory import create_dataset

import rg_verl.data.candidates as candidates
from rg_verl.common.names import SPLIT_URI, chat_messages, system_prompt
from rg_verl.data import search_cache
from rg_verl.data.config import AdaptiveWeightsConfig, CurriculumConfig, ReasoningGymConfig
from rg_verl.data.curriculum import MixState
from rg_verl.data.dataset import ReasoningGymDataset, dataset_seed, split_seed, to_json_safe
from rg_verl.data.files import FileDataset, SourceError

REPO = Path(__file__).resolve().parents[1]
CONFIGS_DIR = REPO / "configs"
RULES = ("old", "new", "warm", "shipped")
STORED = ("warm", "shipped")  # runs of the new rule with stored searches, held-out splits only
TRAIN_RATIO_GOAL = 1.15
VAL_SECONDS_GOAL = 30.0
# the warm-up's seed: above every split's seed space (base < 10**9, three splits of 10**9), below 2**32
WARM_UP_SEED = 4 * 10**9


# ---- counting what the rules generate


@dataclasses.dataclass
class Tally:
    """Per dataset name: items generated and their seconds, datasets constructed (candidate sets) and theirs."""

    calls: Counter = dataclasses.field(default_factory=Counter)
    seconds: defaultdict = dataclasses.field(default_factory=lambda: defaultdict(float))
    sets: Counter = dataclasses.field(default_factory=Counter)
    set_seconds: defaultdict = dataclasses.field(default_factory=lambda: defaultdict(float))

    def total(self, name: str) -> float:
        return self.seconds[name] + self.set_seconds[name]

    def built(self, name: str, build: Callable[[], Any]) -> Any:
        """``build()``, one dataset (candidate set) of ``name``, counted and timed."""
        start = time.perf_counter()
        try:
            return build()
        finally:
            self.sets[name] += 1
            self.set_seconds[name] += time.perf_counter() - start


# ---- the old rule, the baseline


class OldRule:
    """A split under the seeds-only rule: item ``i`` is item ``i`` of the picked dataset, unfiltered."""

    def __init__(self, split: str, data: DictConfig, tally: Tally | None = None):
        settings = ReasoningGymConfig.from_section(data.get("reasoning_gym"), where="data.reasoning_gym")
        train = split == "train"
        self.mix = settings.mix(split)
        state = MixState(
            self.mix,
            settings.curriculum if train else CurriculumConfig(),
            settings.adaptive_weights if train else AdaptiveWeightsConfig(),
        )
        self.size = settings.size(split)
        self.split_seed = split_seed(settings.seed, split)
        self.prompt = system_prompt(settings.system_prompt)
        self.tally = tally or Tally()
        self.configs = {name: state.dataset_config(name, spec.config) for name, spec in self.mix.items()}
        self.datasets = {}
        for name, spec in self.mix.items():
            seed = dataset_seed(settings.seed, split, name)
            if spec.source is not None:
                self.datasets[name] = FileDataset(name, spec.source, split, self.configs[name], seed=seed)
            else:
                kwargs = {**self.configs[name], "seed": seed, "size": self.size}
                self.datasets[name] = self.tally.built(name, lambda n=name, k=kwargs: create_dataset(n, **k))
        self.names = [name for name, weight in state.weights.items() if weight > 0]
        self.cum_weights = list(itertools.accumulate(state.weights[name] for name in self.names))

    def __len__(self) -> int:
        return self.size

    def pick(self, index: int) -> str:
        u = random.Random(f"{self.split_seed}:{index}").random() * self.cum_weights[-1]
        return self.names[min(bisect.bisect_right(self.cum_weights, u), len(self.names) - 1)]

    def __getitem__(self, index: int) -> dict:
        name = self.pick(index)
        start = time.perf_counter()
        entry = self.datasets[name][index]
        if self.mix[name].source is None:
            self.tally.calls[name] += 1
            self.tally.seconds[name] += time.perf_counter() - start
        entry = to_json_safe(entry)
        messages = chat_messages(self.prompt, entry["question"])
        return {"raw_prompt": messages, "entry": entry, "dummy_tensor": torch.tensor([0], dtype=torch.uint8)}


# ---- timing one split under one rule


@dataclasses.dataclass
class Run:
    """One timed first batch: wall and CPU seconds (constructor included), the constructor's share, counts."""

    wall: float
    cpu: float
    build: float
    build_calls: int  # items generated by the constructor (the new rule's probes)
    items: int
    kept: Counter  # kept generator items per dataset
    tally: Tally

    @property
    def per_kept(self) -> float:
        kept = sum(self.kept.values())
        return sum(self.tally.calls.values()) / kept if kept else float("nan")


@contextlib.contextmanager
def new_rule_counting(tally: Tally) -> Iterator[None]:
    """Counts today's candidates (``Candidates.item``) and candidate sets (built or reseeded copies)."""
    item, make, reseed = candidates.Candidates.item, candidates.create_dataset, candidates.reseeded
    names: dict[type, str] = {}  # a dataset's class -> its name, for the copies of set 0

    def counted_make(name: str, **kwargs: Any) -> Any:
        dataset = tally.built(name, lambda: make(name, **kwargs))
        names[type(dataset)] = name
        return dataset

    def counted_reseed(dataset: Any, seed: int) -> Any:
        return tally.built(names.get(type(dataset), type(dataset).__name__), lambda: reseed(dataset, seed))

    def counted_item(self: candidates.Candidates, attempt: int, index: int) -> dict:
        # a set built on the way is counted as a set, not as generation
        start, building = time.perf_counter(), sum(tally.set_seconds.values())
        try:
            return item(self, attempt, index)
        finally:
            tally.calls[self.name] += 1
            tally.seconds[self.name] += time.perf_counter() - start - (sum(tally.set_seconds.values()) - building)

    with (
        mock.patch.object(candidates, "create_dataset", counted_make),
        mock.patch.object(candidates, "reseeded", counted_reseed),
        mock.patch.object(candidates.Candidates, "item", counted_item),
    ):
        yield


def batch_size(data: DictConfig, split: str, dataset_len: int, train_items: int | None) -> int:
    """How many items verl's first batch of ``split`` holds (``train_items`` overrides the training batch)."""
    if split == "train":
        size = train_items or data.get("gen_batch_size") or data.train_batch_size
    elif split == "val":  # verl's validation loader: val_batch_size, or the whole split in one batch when null
        size = data.get("val_batch_size") or dataset_len
    else:  # the evaluator generates the whole evaluation split
        size = dataset_len
    return min(size, dataset_len)


@contextlib.contextmanager
def stored_searches(rule: str, folder: Path) -> Iterator[None]:
    """The new rule's stored searches: ``new`` keeps its searches in ``folder`` and reads none, ``warm`` reads
    what ``new`` kept there, ``shipped`` reads the package's over an empty ``folder``."""
    shipped = search_cache.SHIPPED if rule == "shipped" else None
    with mock.patch.dict(os.environ, {search_cache.ENV: str(folder)}), mock.patch.object(
        search_cache, "SHIPPED", shipped
    ):
        yield


def time_split(rule: str, split: str, data: DictConfig, train_items: int | None, folder: Path) -> Run:
    """Builds ``split`` under ``rule`` and fetches its first batch, indices ``0..B-1``."""
    tally = Tally()
    start, cpu = time.perf_counter(), time.process_time()
    counting = contextlib.nullcontext() if rule == "old" else new_rule_counting(tally)
    stored = contextlib.nullcontext() if rule == "old" else stored_searches(rule, folder)
    with counting, stored:
        if rule == "old":
            dataset = OldRule(split, data, tally)
        else:
            dataset = ReasoningGymDataset(f"{SPLIT_URI}{split}", None, data)
        built, build_calls = time.perf_counter(), sum(tally.calls.values())
        items = batch_size(data, split, len(dataset), train_items)
        for index in range(items):
            dataset[index]
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    picks = (dataset.pick(index) for index in range(items))
    kept = Counter(name for name in picks if dataset.mix[name].source is None)
    if kept and not tally.calls:
        raise RuntimeError(f"{rule} rule: no generated item was counted; the counting hook missed its datasets")
    return Run(wall, cpu, built - start, build_calls, items, kept, tally)


def warm_up(data: DictConfig, splits: list[str]) -> None:
    """One item of every dataset of ``splits``, from a seed no split uses: module-level data loads here."""
    for split in splits:
        old = OldRule(split, data)
        for name, spec in old.mix.items():
            if spec.source is None:
                create_dataset(name, **old.configs[name], seed=WARM_UP_SEED, size=1)[0]


def measure_config(data: DictConfig, args: argparse.Namespace) -> dict[str, dict[str, Run]]:
    """split -> rule -> the best of ``args.repeats`` runs (old and new alternate in order; each repeat of
    ``warm`` follows a ``new`` run, whose stored searches it reads)."""
    warm_up(data, args.splits)
    best: dict[str, dict[str, Run]] = {split: {} for split in args.splits}
    rules = [rule for rule in args.rules if rule not in STORED]
    for repeat in range(args.repeats):
        order = rules if repeat % 2 == 0 else rules[::-1]
        for split in args.splits:
            with tempfile.TemporaryDirectory() as new_folder, tempfile.TemporaryDirectory() as empty:
                stored = [rule for rule in STORED if rule in args.rules and split != "train"]
                if "warm" in stored and "new" not in order:
                    raise SystemExit("--rules warm needs new: it reads the searches that new stored")
                for rule in [*order, *stored]:
                    folder = Path(empty if rule == "shipped" else new_folder)
                    run = time_split(rule, split, data, args.train_items, folder)
                    if rule not in best[split] or run.wall < best[split][rule].wall:
                        best[split][rule] = run
    return best


# ---- configs and the report


def shipped_configs(substring: str | None) -> list[Path]:
    # configs/oreo/ trains on collected files: no split of its own
    paths = sorted(p for p in CONFIGS_DIR.rglob("*.yaml") if not p.name.startswith("_") and p.parent.name != "oreo")
    return [p for p in paths if substring is None or substring in config_id(p)]


def config_id(path: Path) -> str:
    return str(path.relative_to(CONFIGS_DIR).with_suffix(""))


def composed_data(path: Path) -> DictConfig:
    """The ``data`` section of ``path``, composed from outside the repository (no config reads the cwd)."""
    previous = os.getcwd()
    os.chdir(tempfile.gettempdir())
    try:
        with initialize_config_dir(config_dir=str(path.parent), version_base=None):
            return compose(config_name=path.stem).data
    finally:
        os.chdir(previous)


def slowest(run: Run, top: int = 2) -> str:
    tally = run.tally
    names = sorted(tally.seconds.keys() | tally.set_seconds.keys(), key=tally.total, reverse=True)[:top]
    return ", ".join(
        f"{name} {tally.total(name):.2f}s x{tally.calls[name] / max(run.kept[name], 1):.1f} "
        f"({tally.sets[name]} sets {tally.set_seconds[name]:.2f}s)"
        for name in names
    )


def ratio(new: float, old: float) -> float:
    return new / old if old > 0 else float("nan")


def report_config(name: str, data: DictConfig, best: dict[str, dict[str, Run]]) -> None:
    mix = {split: len(ReasoningGymConfig.from_section(data.reasoning_gym).mix(split)) for split in best}
    print(f"\n== {name}: datasets {', '.join(f'{s} {n}' for s, n in mix.items())} ==")
    print(f"{'split':<6}{'items':>6}{'old s':>9}{'new s':>10}{'ratio':>9}{'cpu ratio':>10}{'build s':>12}"
          f"{'probes':>7}{'cand/item':>10}{'warm s':>9}{'shipped s':>10}"
          "  slowest (seconds, generated per kept, sets built)")  # fmt: skip
    for split, runs in best.items():
        old, new = runs.get("old"), runs.get("new")
        cells = (f"{old.wall:>9.3f}" if old else f"{'-':>9}") + (f"{new.wall:>10.3f}" if new else f"{'-':>10}")
        if old and new:
            cells += f"{ratio(new.wall, old.wall):>9.2f}{ratio(new.cpu, old.cpu):>10.2f}"
        else:
            cells += f"{'-':>9}{'-':>10}"
        run = new or old
        cells += f"{run.build:>12.3f}{run.build_calls:>7}{run.per_kept:>10.2f}"
        for rule, width in (("warm", 9), ("shipped", 10)):
            cells += f"{runs[rule].wall:>{width}.3f}" if rule in runs else f"{'-':>{width}}"
        print(f"{split:<6}{run.items:>6}{cells}  {slowest(run)}", flush=True)


def train_goal(train: dict[str, dict[str, Run]], clock: str) -> str:
    """The training-cost goal on ``clock`` (``wall`` or ``cpu`` seconds): worst config, overall, met or not."""
    ratios = {n: ratio(getattr(r["new"], clock), getattr(r["old"], clock)) for n, r in train.items()}
    worst = max(ratios, key=ratios.get)
    overall = ratio(*(sum(getattr(r[rule], clock) for r in train.values()) for rule in ("new", "old")))
    over = [f"{n} {x:.2f}" for n, x in ratios.items() if x > TRAIN_RATIO_GOAL]
    met = "met" if not over and overall <= TRAIN_RATIO_GOAL else "NOT met"
    met += f": {', '.join(over)}" if over else ""
    return (f"training generation new/old, {clock} time: worst {ratios[worst]:.2f} ({worst}), overall {overall:.2f} "
            f"(sum new / sum old)  goal <= {TRAIN_RATIO_GOAL}: {met}")  # fmt: skip


def summary(results: dict[str, dict[str, dict[str, Run]]], skipped: dict[str, str], args: argparse.Namespace) -> None:
    print(f"\n== summary (seconds, best of {args.repeats}) ==")
    for name, reason in skipped.items():
        print(f"skipped {name}: {reason}")
    train = {n: r["train"] for n, r in results.items() if "train" in r}
    for rule in (rule for rule in args.rules if rule not in STORED and train):
        wall, cpu = (sum(getattr(runs[rule], clock) for runs in train.values()) for clock in ("wall", "cpu"))
        items = sum(runs[rule].items for runs in train.values())
        print(f"training, {rule} rule: {wall:.2f} s wall ({cpu:.2f} s CPU) for {items} items over {len(train)} configs")
    if {"old", "new"} <= set(args.rules) and train:
        # on a shared machine the CPU time of this process is the steadier of the two
        print(train_goal(train, "wall"))
        print(train_goal(train, "cpu"))
    labels = {"new": "nothing stored", "warm": "a second run", "shipped": "a first run of a shipped config"}
    for rule in ("new", "warm", "shipped"):
        val = {n: r["val"][rule] for n, r in results.items() if rule in r.get("val", {})}
        if not val:
            continue
        worst = max(val, key=lambda n: val[n].wall)
        over = [f"{n} {run.wall:.1f} s" for n, run in val.items() if run.wall >= VAL_SECONDS_GOAL]
        met = "met" if not over else "NOT met: " + ", ".join(over)
        goal = f"goal < {VAL_SECONDS_GOAL:.0f} s for every config: {met}" if rule == "shipped" else f"{len(over)} over"
        print(f"first validation batch, {rule} ({labels[rule]}): worst {val[worst].wall:.1f} s wall ({worst})  {goal}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default=None, help="only configs whose id (e.g. games_qwen_3b) holds this")
    parser.add_argument("--repeats", type=int, default=1, help="timed runs per rule and split, alternating; the min")
    parser.add_argument("--train-items", type=int, default=None, help="training items (default: the batch size)")
    parser.add_argument("--splits", default="train,val", help="comma-separated, of train, val, eval")
    parser.add_argument("--rules", default=",".join(RULES), help=f"comma-separated, of {', '.join(RULES)}")
    args = parser.parse_args(argv)
    args.splits, args.rules = args.splits.split(","), args.rules.split(",")
    if not set(args.splits) <= {"train", "val", "eval"} or not set(args.rules) <= set(RULES):
        parser.error(f"--splits takes train, val, eval; --rules takes {', '.join(RULES)}")
    if args.repeats < 1 or (args.train_items is not None and args.train_items < 1):
        parser.error("--repeats and --train-items must be at least 1")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    print("$ python " + shlex.join([os.path.relpath(__file__), *(sys.argv[1:] if argv is None else argv)]))
    results: dict[str, dict[str, dict[str, Run]]] = {}
    skipped: dict[str, str] = {}
    paths = shipped_configs(args.configs)
    if not paths:
        raise SystemExit(f"no shipped config matches {args.configs!r}")
    for path in paths:
        name, data = config_id(path), composed_data(path)
        try:
            results[name] = measure_config(data, args)
        except SourceError as error:
            skipped[name] = str(error).splitlines()[0]
            print(f"\n== {name}: skipped: {skipped[name]} ==", flush=True)
            continue
        report_config(name, data, results[name])
    summary(results, skipped, args)


if __name__ == "__main__":
    main()
