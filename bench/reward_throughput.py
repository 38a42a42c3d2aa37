"""Reward throughput and time to first batch: rg-verl against reasoning-gym's own approach.

    python bench/reward_throughput.py [--n 2000] [--repeats 3] [--epoch 500] [--seed 0]

Two measurements, in one process:

1. Reward throughput. ``--n`` completions are built once (fixed seed, outside any timed region)
   for items of a 10-dataset mix: correct ones (``<think>…</think><answer>{answer}</answer>``),
   wrong ones (a perturbed answer), malformed ones (no tags, unclosed answer tag, nested answer
   tags, two answers) and a few hostile ones (1 MB strings, ``\\boxed{9^{9^{9^{9}}}}``, deeply
   nested tags, ...). The same completions are scored, sequentially and in-process, by

   * ``ours``: ``rg_verl.reward.compute_score`` (lenient mode, no extra terms);
   * ``reference``: reasoning-gym's training-folder loop: ``reasoning_gym.utils.extract_answer``
     (the last ``<answer>(.*?)</answer>`` regex match) then the dataset's ``score_answer(answer,
     entry)`` from ``reasoning_gym.factory.get_score_answer_fn``.

   The hostile completions are first probed one by one in a forked child with a time limit
   (``--probe-timeout``); any that overruns the limit on either side is left out of the timed
   runs (for both sides) and reported as such. The sides run ``--repeats`` times, alternating;
   the best throughput of each is reported, with the worst single-item latency over all runs.

2. Time to first batch. ``ReasoningGymDataset`` for a mix of knight_swap, futoshiki, chain_sum
   and leg_counting: constructor plus ``dataset[i]`` for ``i < 32``, against pre-generating an
   epoch of ``--epoch`` items the reference way (``reasoning_gym.create_dataset(name, size=share)``
   per dataset, then iterating every item). A dataset whose pre-generation would exceed
   ``--pregen-budget`` seconds is generated only in part and its time extrapolated linearly.
"""

import argparse
import multiprocessing
import resource
import statistics
import time
from collections import Counter
from pathlib import Path

# beside this script (python bench/reward_throughput.py puts bench/ first on sys.path)
from reward_completions import REWARD_MIX, build_completions, make_config

FIRST_BATCH_MIX = ("chain_sum", "leg_counting", "futoshiki", "knight_swap")  # cheapest first (pre-generation budget)
BATCH_SIZE = 32
SIDES = ("ours", "reference")



# ---------------------------------------------------------------------------------------------
# the two scorers
# ---------------------------------------------------------------------------------------------


def make_scorers():
    """{side: fn(completion) -> score}; each side's per-dataset state is built here, untimed."""
    from reasoning_gym.factory import get_score_answer_fn
    from reasoning_gym.utils import extract_answer

    from rg_verl.reward import compute_score

    reference_fns = {name: get_score_answer_fn(name) for name in REWARD_MIX}

    def ours(c):
        return compute_score(c["data_source"], c["text"], c["ground_truth"], c["extra_info"])["score"]

    def reference(c):
        answer = extract_answer(c["text"], tag_name="answer")
        try:
            return float(reference_fns[c["dataset"]](answer, c["entry"]))
        except Exception:  # the reference loop has no guard; count it as 0 rather than abort the bench
            return float("nan")

    return {"ours": ours, "reference": reference}


def _probe_child(fn, completion, conn, mem_limit: int) -> None:
    try:
        resource.setrlimit(resource.RLIMIT_AS, (mem_limit, mem_limit))
    except (ValueError, OSError):
        pass
    start = time.perf_counter()
    try:
        score = fn(completion)
    except BaseException as e:  # noqa: BLE001 - report anything, e.g. MemoryError
        score = f"raised {type(e).__name__}"
    conn.send((time.perf_counter() - start, score))


def _vm_size() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    return 0


def probe(fn, completion, timeout: float):
    """(seconds or None if it overran ``timeout``, score) of one call, in a forked child."""
    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_probe_child, args=(fn, completion, send, _vm_size() + (4 << 30)), daemon=True)
    proc.start()
    send.close()
    result = (None, None)
    if recv.poll(timeout):
        try:
            result = recv.recv()
        except EOFError:
            result = (None, "child died")
    proc.join(0.5)
    if proc.is_alive():
        proc.kill()
        proc.join()
    elif result == (None, None):
        result = (None, f"child exited rc {proc.exitcode}")
    return result


def timed_pass(fn, completions):
    """(items/s, scores, per-item seconds) for one sequential pass.

    sympy's global cache is cleared first: the sides score the same expressions, so without this
    whichever side runs second would find the other's sympy results cached (in training every item
    is new).
    """
    from sympy.core.cache import clear_cache

    clear_cache()
    scores, latencies = [], []
    clock = time.perf_counter
    start = clock()
    for c in completions:
        t = clock()
        scores.append(fn(c))
        latencies.append(clock() - t)
    return len(completions) / (clock() - start), scores, latencies


def fmt_score(value) -> str:
    return f"{value:.2f}" if isinstance(value, float) else "-" if value is None else str(value)[:6]


def fmt_s(seconds, timeout) -> str:
    return f"> {timeout:.0f}" if seconds is None else f"{seconds:.3f}"


def is_hostile(completion: dict) -> bool:
    return completion["kind"].startswith("hostile")


def warm_up(scorers: dict, completions: list[dict]) -> None:
    """One untimed call per dataset and side, so each side's per-dataset state is built."""
    for fn in scorers.values():
        seen = set()
        for c in completions:
            if c["dataset"] not in seen and not is_hostile(c):
                seen.add(c["dataset"])
                fn(c)


def describe(completions: list[dict], build_s: float, seed: int) -> None:
    kinds = Counter(c["kind"].split(":")[0] for c in completions)
    total_chars = sum(len(c["text"]) for c in completions)
    print(f"built {len(completions)} completions in {build_s:.1f} s (seed {seed}): "
          + ", ".join(f"{k} {v}" for k, v in kinds.items()) + f"; {total_chars / 1e6:.1f} M chars in all")  # fmt: skip
    print("datasets: " + ", ".join(f"{k} {v}" for k, v in sorted(Counter(c["dataset"] for c in completions).items())))


def probe_hostile(scorers: dict, completions: list[dict], timeout: float) -> tuple[set[int], list]:
    """(indices of the hostile completions that overran ``timeout`` on a side, (completion, results) rows)."""
    print(f"\n== hostile inputs, one call each in a forked child, limit {timeout:.0f} s ==")
    print(f"{'kind':<34}{'dataset':<27}{'ours s':>9}{'ref s':>9}{'ours':>7}{'ref':>7}")
    excluded, probe_rows = set(), []
    for i, c in enumerate(completions):
        if not is_hostile(c):
            continue
        res = {side: probe(fn, c, timeout) for side, fn in scorers.items()}
        probe_rows.append((c, res))
        if any(sec is None for sec, _ in res.values()):
            excluded.add(i)
        score = {s: fmt_score(v) for s, (_, v) in res.items()}
        seconds = {s: fmt_s(sec, timeout) for s, (sec, _) in res.items()}
        print(f"{c['kind'][8:]:<34}{c['dataset']:<27}{seconds['ours']:>9}{seconds['reference']:>9}"
              f"{score['ours']:>7}{score['reference']:>7}", flush=True)  # fmt: skip
    return excluded, probe_rows


def throughput(scorers: dict, timed: list[dict], repeats: int) -> tuple[dict, dict, dict, dict]:
    """Timed passes, alternating the sides: (best items/s, best without hostile, worst (s, item), last scores)."""
    print(f"\n== reward throughput, {len(timed)} completions, sequential in-process ==")
    print(f"{'run':<14}{'items/s':>10}{'(no hostile)':>14}{'worst s':>9}  worst item")
    regular = [not is_hostile(c) for c in timed]
    warmup = timed[: max(1, len(timed) // 10)]
    for side in SIDES:  # an untimed pass over a tenth of the items: lazy imports, first-call costs
        timed_pass(scorers[side], warmup)
    best = {side: 0.0 for side in SIDES}
    best_regular = {side: 0.0 for side in SIDES}
    worst = {side: (0.0, None) for side in SIDES}
    scores = {}
    for run in range(repeats):
        for side in SIDES if run % 2 == 0 else SIDES[::-1]:
            rate, side_scores, lat = timed_pass(scorers[side], timed)
            scores[side] = side_scores
            j = max(range(len(lat)), key=lat.__getitem__)
            # throughput over the regular completions only: their share of the pass
            rate_regular = sum(regular) / sum(t for t, r in zip(lat, regular, strict=True) if r)
            best[side] = max(best[side], rate)
            best_regular[side] = max(best_regular[side], rate_regular)
            if lat[j] > worst[side][0]:
                worst[side] = (lat[j], timed[j])
            print(f"{side + '_' + str(run):<14}{rate:>10.1f}{rate_regular:>14.1f}{lat[j]:>9.3f}  "
                  f"{timed[j]['dataset']} / {timed[j]['kind']}", flush=True)  # fmt: skip
    return best, best_regular, worst, scores


def mean_by_kind(timed: list[dict], scores: dict) -> None:
    print("\n== mean score by kind (last run; ref nan = scorer raised) ==")
    print(f"{'kind':<34}{'count':>6}{'ours':>8}{'ref':>8}{'differ':>8}")
    by_kind = {}
    for c, so, sr in zip(timed, scores["ours"], scores["reference"], strict=True):
        by_kind.setdefault(c["kind"], []).append((so, sr))
    for kind, pairs in by_kind.items():
        mo = statistics.mean(p[0] for p in pairs)
        mr = statistics.mean(p[1] for p in pairs)
        differ = sum(abs(p[0] - p[1]) > 1e-9 or p[1] != p[1] for p in pairs)
        print(f"{kind:<34}{len(pairs):>6}{mo:>8.3f}{mr:>8.3f}{differ:>8}")


def worst_latency(worst: dict, probe_rows: list, timeout: float) -> dict[str, str]:
    """Each side's worst latency over everything, the probed hostile inputs included, as text."""
    overall = {}
    for side in SIDES:
        sec, c = worst[side]
        label = f"{sec:.3f} s ({c['dataset']} / {c['kind']})" if c else "-"
        unfinished = [f"{pc['dataset']} / {pc['kind']}" for pc, res in probe_rows if res[side][0] is None]
        if unfinished:
            label = f"> {timeout:.0f} s, did not finish: {'; '.join(unfinished)} (worst finished: {label})"
        overall[side] = label
    return overall


def reward_benchmark(args):
    t0 = time.perf_counter()
    completions = build_completions(args.n, args.seed)
    build_s = time.perf_counter() - t0
    scorers = make_scorers()
    warm_up(scorers, completions)
    describe(completions, build_s, args.seed)
    excluded, probe_rows = probe_hostile(scorers, completions, args.probe_timeout)
    timed = [c for i, c in enumerate(completions) if i not in excluded]
    if excluded:
        print(f"({len(excluded)} hostile completions overran the limit on at least one side and are left out of "
              f"the timed runs below, for both sides)")  # fmt: skip
    best, best_regular, worst, scores = throughput(scorers, timed, args.repeats)
    mean_by_kind(timed, scores)
    overall = worst_latency(worst, probe_rows, args.probe_timeout)
    if any(c["kind"] == "hostile:1MB_unclosed_answer_tags" and res["reference"][0] is None for c, res in probe_rows):
        regex_blowup(scorers)
    return best, best_regular, overall, len(excluded)


def regex_blowup(scorers) -> None:
    """How the reference's regex extraction grows on unclosed ``<answer>`` tags (it overran the probe)."""
    from reasoning_gym.utils import extract_answer as reference_extract

    from rg_verl.reward import extract_answer as our_extract

    print("\n== extraction only, on a string of unclosed <answer> tags ==")
    print(f"{'size':>8}{'ours s':>10}{'ref s':>10}")
    sizes, ref_times = (4, 8, 16), []
    for kb in sizes:
        text = "<answer>" * (kb * 1024 // len("<answer>"))
        t = time.perf_counter()
        our_extract(text)
        ours = time.perf_counter() - t
        t = time.perf_counter()
        reference_extract(text, tag_name="answer")
        ref_times.append(time.perf_counter() - t)
        print(f"{kb:>6}KB{ours:>10.4f}{ref_times[-1]:>10.3f}", flush=True)
    growth = ref_times[-1] / ref_times[-2]
    at_1mb = ref_times[-1] * (1024 / sizes[-1]) ** 2
    print(f"reference grows x{growth:.1f} per doubling (quadratic: x4); extrapolated quadratically to 1 MB: "
          f"~{at_1mb / 60:.0f} min")  # fmt: skip


# ---------------------------------------------------------------------------------------------
# time to first batch
# ---------------------------------------------------------------------------------------------


def first_batch_benchmark(args):
    from reasoning_gym import create_dataset

    from rg_verl.data.dataset import ReasoningGymDataset

    print(f"\n== time to first batch: {', '.join(FIRST_BATCH_MIX)} (equal weights) ==")
    config = make_config(FIRST_BATCH_MIX, args.epoch, args.seed)
    start = time.perf_counter()
    dataset = ReasoningGymDataset("reasoning_gym://train", config=config)
    built = time.perf_counter() - start
    batch = [dataset[i] for i in range(BATCH_SIZE)]
    ours = time.perf_counter() - start
    picked = Counter(item["extra_info"]["dataset"] for item in batch)
    print(f"ours: constructor {built:.3f} s + first {BATCH_SIZE} items {ours - built:.3f} s = {ours:.3f} s "
          f"(batch: {', '.join(f'{k} {v}' for k, v in sorted(picked.items()))})")  # fmt: skip

    share = args.epoch // len(FIRST_BATCH_MIX)
    print(f"reference: create_dataset(name, size={share}) per dataset, then every item "
          f"(epoch {share * len(FIRST_BATCH_MIX)} items)")  # fmt: skip
    print(f"{'dataset':<16}{'generated':>10}{'seconds':>9}{'ms/item':>9}{'epoch s':>9}")
    total, extrapolated, spent = 0.0, [], 0.0
    for k, name in enumerate(FIRST_BATCH_MIX):
        budget = (args.pregen_budget - spent) / (len(FIRST_BATCH_MIX) - k)  # what is left, shared by the rest
        start = time.perf_counter()
        ds = create_dataset(name, size=share, seed=args.seed)
        done = 0
        for i in range(share):
            ds[i]
            done += 1
            if time.perf_counter() - start > budget:
                break
        elapsed = time.perf_counter() - start
        spent += elapsed
        full = elapsed * share / done
        if done < share:
            extrapolated.append(f"{name} ({done}/{share} items)")
        total += full
        mark = "*" if done < share else ""
        print(f"{name:<16}{done:>10}{elapsed:>9.2f}{1000 * elapsed / done:>9.1f}{full:>8.1f}{mark:1}", flush=True)
    if extrapolated:
        print(f"* extrapolated linearly from a partial run: {', '.join(extrapolated)}")
    print(f"pre-generation of the epoch: {total:.1f} s{' (partly extrapolated)' if extrapolated else ''}")
    return ours, total, bool(extrapolated)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000, help="completions to score")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes per side, alternating")
    parser.add_argument("--epoch", type=int, default=500, help="epoch size for the time-to-first-batch comparison")
    parser.add_argument("--seed", type=int, default=0, help="seed of the items and completions")
    parser.add_argument("--probe-timeout", type=float, default=10.0, help="limit per hostile call, seconds")
    parser.add_argument("--pregen-budget", type=float, default=60.0,
                        help="seconds of reference pre-generation before extrapolating")  # fmt: skip
    args = parser.parse_args()
    if args.n < 100:
        parser.error("--n must be at least 100")
    if args.epoch < BATCH_SIZE:
        parser.error(f"--epoch must be at least {BATCH_SIZE}")

    best, best_regular, worst, excluded = reward_benchmark(args)
    ours_ttfb, pregen, extrapolated = first_batch_benchmark(args)

    print("\n== summary ==")
    print(f"reward throughput (best of {args.repeats}): ours {best['ours']:.1f} items/s, "
          f"reference {best['reference']:.1f} items/s")  # fmt: skip
    print(f"reward throughput ratio (ours/reference): {best['ours'] / best['reference']:.2f}  (goal >= 1)")
    print(f"reward throughput ratio without the hostile completions (ours/reference): "
          f"{best_regular['ours'] / best_regular['reference']:.2f}")  # fmt: skip
    print(f"worst item latency (ours): {worst['ours']}  (goal <= 1 s)")
    print(f"worst item latency (reference): {worst['reference']}")
    if excluded:
        print(f"hostile completions left out of the throughput runs: {excluded}")
    print(f"time to first batch (ours): {ours_ttfb:.2f} s vs pre-generation: {pregen:.1f} s"
          f"{' (extrapolated)' if extrapolated else ''}")  # fmt: skip
    print(f"time to first batch ratio (pre-generation/ours): {pregen / ours_ttfb:.1f}")


if __name__ == "__main__":
    main()
