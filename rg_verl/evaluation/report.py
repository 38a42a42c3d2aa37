"""The run's reports: results.json (the reference evaluator's structure plus ``metrics``), summary.md and scores.png."""

from __future__ import annotations

import io
import json
import math
from collections.abc import Sequence
from pathlib import Path

from rg_verl.common.atomic import write_atomic
from rg_verl.data.holdout import normalise, question_hash, split_of
from rg_verl.data.reference_questions import withheld
from rg_verl.evaluation.config import EvalConfig
from rg_verl.evaluation.items import FILE, REFERENCE, SPLIT, EvalDataset
from rg_verl.evaluation.metrics import aggregate

__all__ = ["build_results", "summary_markdown", "write_reports"]

ITEM_FIELDS = ("index", "question", "expected_answer", "best_score", "mean_score", "completions")
ITEM_KINDS = {
    SPLIT: "rg-verl's evaluation split",
    REFERENCE: "reasoning-gym's own items (create_dataset)",
    FILE: "the rows of its eval file",
}


def _item_counts(ds: EvalDataset, items: list[dict], reference_training: dict[str, set[str]] | None) -> dict:
    """Which items ``ds`` was evaluated on, and how many of them training could have seen (module docstring)."""
    counts: dict = {"items": ds.kind}
    questions = [item["question"] for item in items]
    if ds.kind == REFERENCE:
        counts["rg_verl_trainable"] = sum(split_of(q) == "train" and not withheld(q) for q in questions)
    if reference_training is not None and ds.kind != FILE:
        seen = reference_training.get(ds.entry.dataset, set())
        counts["in_reference_training"] = sum(question_hash(q) in seen for q in questions)
    return counts


def build_results(
    config: EvalConfig,
    datasets: Sequence[EvalDataset],
    records: dict[str, dict],
    metadata: dict,
    reference_training: dict[str, set[str]] | None = None,
) -> dict:
    """The results.json document for ``datasets``, from the finished item ``records`` (by key)."""
    k_values = config.k_values or [1]
    categories: dict[str, dict] = {}
    all_items: list[list[dict]] = []
    for ds in datasets:
        items = [records[ds.item_key(i)] for i in range(len(ds)) if ds.item_key(i) in records]
        completions = [item["completions"] for item in items]
        metrics = aggregate(completions, k_values)
        distinct = len({normalise(item["question"]) for item in items})
        dataset = {
            "name": ds.entry.dataset,
            "category": ds.category,
            "average_score": metrics["mean_score"],
            "total_examples": len(items),
            "distinct_questions": distinct,
            # fewer items than asked for, or repeats: the evaluation share (or the file) holds too few questions
            "space_short": len(ds) < ds.entry.size or distinct < len(items),
            "config": {**ds.entry.params, "size": ds.entry.size, "seed": ds.entry.seed},
            **_item_counts(ds, items, reference_training),
            "metrics": metrics,
        }
        if config.save_full_results:
            dataset["results"] = [{k: item[k] for k in ITEM_FIELDS if k in item} for item in items]
        category = categories.setdefault(ds.category, {"name": ds.category, "datasets": [], "_items": []})
        category["datasets"].append(dataset)
        category["_items"].extend(completions)
        all_items.extend(completions)
    for category in categories.values():
        category["metrics"] = aggregate(category.pop("_items"), k_values)
    results = {"metrics": aggregate(all_items, k_values), "categories": list(categories.values())}
    if config.save_metadata:
        results = {"metadata": metadata, **results}
    return results


def _fmt(value, percent: bool = True) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if percent:
        return f"{100 * value:.1f}"
    return f"{value:.1f}" if isinstance(value, float) else str(value)


def _columns(k_values: Sequence[int], max_turns: int = 0) -> list[tuple[str, str, bool]]:
    """(header, metric key, shown as a percentage); with retry episodes of ``max_turns`` tries, their columns too."""
    columns = [
        ("items", "num_items", False),
        ("mean score", "mean_score", True),
        ("accuracy", "accuracy", True),
        ("strict", "accuracy_strict", True),
        ("lenient", "accuracy_lenient", True),
    ]
    columns += [(f"pass@{k}", f"pass@{k}", True) for k in k_values if k > 1]
    columns += [(f"maj@{k}", f"maj@{k}", True) for k in k_values if k > 1]
    columns += [
        ("format", "format_rate", True),
        ("tokens", "mean_response_tokens", False),
        ("revised", "revision_rate", True),
        ("self-corr.", "self_correction_rate", True),
    ]
    if max_turns:
        columns.append(("turns", "mean_turns", False))
        columns += [(f"@turn{j}", f"success@turn{j}", True) for j in range(1, max_turns + 1)]
    return columns


def _table(rows: list[tuple[str, dict]], columns: list[tuple[str, str, bool]], first: str) -> str:
    lines = [
        "| " + " | ".join([first] + [c[0] for c in columns]) + " |",
        "|" + "---|" + "---:|" * len(columns),
    ]
    for label, metrics in rows:
        lines.append("| " + " | ".join([label] + [_fmt(metrics.get(key), pct) for _, key, pct in columns]) + " |")
    return "\n".join(lines)


def summary_markdown(results: dict, config: EvalConfig) -> str:
    """summary.md: the run's settings, an overall table of categories, then one table per category."""
    k_values = config.k_values or [1]
    max_turns = config.retry.max_turns if config.retry is not None else 0
    columns = _columns(k_values, max_turns)
    turns_note = ""
    if max_turns:
        turns_note = (f" Retry episodes of up to {max_turns} tries: `turns` is the mean number of tries, `@turn<j>` "
                      "the share of episodes right by their j-th try (success@turn-j).")  # fmt: skip
    lines = [
        f"# Evaluation: {config.name}",
        "",
        f"- model: `{config.model_path}` (backend `{config.backend}`)",
        f"- sampling: temperature {config.temperature}, top_p {config.top_p}, max_tokens {config.max_tokens}, "
        f"{config.eval_repeats} completion(s) per item",
        f"- scoring mode: {config.scoring_mode} (accuracy, pass@k and maj@k); strict and lenient accuracy side by side",
        "",
        "Percentages except `items` and `tokens` (mean response length in tokens). `revised`: share of "
        "completions that changed their answer; `self-corr.`: share of those that fixed a wrong answer." + turns_note,
        "",
        "## Overall",
        "",
        _table(
            [(c["name"], c["metrics"]) for c in results["categories"]] + [("**all**", results["metrics"])],
            columns,
            "category",
        ),
    ]
    for category in results["categories"]:
        rows = [(d["name"], d["metrics"]) for d in category["datasets"]]
        rows.append(("**all**", category["metrics"]))
        lines += ["", f"## {category['name']}", "", _table(rows, columns, "dataset")]
    lines += _items_lines(results)
    short = [d for c in results["categories"] for d in c["datasets"] if d.get("space_short")]
    if short:
        lines += ["", "## Datasets whose evaluation share ran short", ""]
        lines += [
            f"- {d['category']}/{d['name']}: {d['total_examples']} items of {d['config']['size']} asked for, "
            f"{d['distinct_questions']} distinct questions"
            for d in short
        ]
    return "\n".join(lines) + "\n"


def _items_lines(results: dict) -> list[str]:
    """summary.md's section on which items each dataset was evaluated on, and what training saw of them."""
    datasets = [d for c in results["categories"] for d in c["datasets"]]
    lines = ["", "## Items", ""]
    for d in datasets:
        text = ITEM_KINDS.get(d.get("items"), str(d.get("items")))
        if "in_reference_training" in d:
            text += f"; {d['in_reference_training']} of {d['total_examples']} are reasoning-gym training questions"
        if d.get("rg_verl_trainable"):
            text += f"; {d['rg_verl_trainable']} could be rg-verl training questions (not in the shipped list)"
        lines.append(f"- {d['category']}/{d['name']}: {text}")
    return lines


def scores_png(results: dict, config: EvalConfig) -> bytes:
    """A per-dataset bar chart: mean score, strict and lenient accuracy, pass@k at the largest k."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    k = max(config.k_values or [1])
    series = [("mean score", "mean_score"), ("strict", "accuracy_strict"), ("lenient", "accuracy_lenient")]
    if k > 1:
        series.append((f"pass@{k}", f"pass@{k}"))
    datasets = [d for c in results["categories"] for d in c["datasets"]]
    labels = [f"{d['category']}/{d['name']}" for d in datasets]
    width = 0.8 / len(series)
    figure = Figure(figsize=(max(6.0, 0.6 * len(datasets) * len(series) / 2 + 2), 4.5), layout="constrained")
    axes = figure.subplots()
    for s, (name, key) in enumerate(series):
        values = [d["metrics"].get(key) or 0.0 for d in datasets]
        bars = axes.bar(
            [i + (s - (len(series) - 1) / 2) * width for i in range(len(datasets))], values, width, label=name
        )
        if len(datasets) <= 12:
            axes.bar_label(bars, fmt="%.2f", fontsize=6)
    axes.set_xticks(range(len(datasets)), labels, rotation=45 if len(datasets) > 3 else 0, ha="right")
    axes.set_ylim(0, 1)
    axes.set_ylabel("score")
    axes.set_title(f"{config.name}: {config.model_path}", fontsize=9)
    axes.legend(fontsize=8)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    return buffer.getvalue()


def write_reports(run_dir: Path, results: dict, config: EvalConfig) -> None:
    """Writes results.json, summary.md and scores.png into ``run_dir``, each atomically."""
    write_atomic(run_dir / "results.json", json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    write_atomic(run_dir / "summary.md", summary_markdown(results, config))
    write_atomic(run_dir / "scores.png", scores_png(results, config))
