"""A comparison's table and plot: one row per model and decoding, read from the evaluator's results.json."""

from __future__ import annotations

import io
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rg_verl.common.atomic import write_atomic
from rg_verl.compare.stages import StageError

__all__ = ["METRICS", "Row", "write_report"]

# the evaluator's overall metrics the table shows: what the learnable reward pays, correctness, length
METRICS = ("format_rate", "accuracy", "mean_score", "mean_response_tokens")


@dataclass(frozen=True)
class Row:
    """One model under one decoding, with the evaluator's overall metrics."""

    model: str
    decoding: str
    samples: int
    round: int | None
    metrics: dict[str, float | None]
    results: str

    @classmethod
    def read(cls, model: str, decoding: str, samples: int, round_: int | None, results: Path) -> Row:
        try:
            overall = json.loads(results.read_text())["metrics"]
        except (OSError, ValueError, KeyError) as error:
            raise StageError(
                f"{results}: not an evaluator's results.json ({error}); delete its folder and run again"
            ) from None
        return cls(model, decoding, samples, round_, {k: overall.get(k) for k in METRICS}, str(results))


def _fmt(value: float | None, percent: bool) -> str:
    if value is None:
        return "–"
    return f"{100 * value:.1f}" if percent else f"{value:.1f}"


def table(rows: list[Row]) -> str:
    """The markdown table; rate metrics also as the difference to the start's row of the same (else sampled) mode."""
    start = {row.decoding: row for row in rows if row.model == "start"}
    head = ["model", "decoding", "samples trained on", "format %", "Δ", "accuracy %", "Δ", "mean score %", "tokens"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for row in rows:
        base = start.get(row.decoding, start.get("sample") if row.decoding.startswith("value_") else None)

        def delta(key: str, row: Row = row, base: Row | None = base) -> str:
            if base is None or row is base or row.metrics[key] is None or base.metrics[key] is None:
                return ""
            return f"{100 * (row.metrics[key] - base.metrics[key]):+.1f}"

        m = row.metrics
        cells = [row.model, row.decoding, str(row.samples), _fmt(m["format_rate"], True), delta("format_rate"),
                 _fmt(m["accuracy"], True), delta("accuracy"), _fmt(m["mean_score"], True),
                 _fmt(m["mean_response_tokens"], False)]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(rows: list[Row]) -> bytes:
    """One bar per row in each of the rate metrics' panels (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = ("format_rate", "accuracy", "mean_score")
    figure, axes = plt.subplots(1, len(keys), figsize=(4 * len(keys), 0.4 * len(rows) + 1.6), squeeze=False)
    labels = [f"{row.model} ({row.decoding})" for row in rows]
    for axis, key in zip(axes[0], keys, strict=True):
        values = [100 * (row.metrics[key] or 0.0) for row in rows]
        axis.barh(range(len(rows)), values, color=["#999999" if r.model == "start" else "#3b75af" for r in rows])
        axis.set_yticks(range(len(rows)), labels if axis is axes[0][0] else [""] * len(rows))
        axis.invert_yaxis()
        axis.set_xlim(0, 100)
        axis.set_title(key.replace("_", " ") + " (%)")
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    plt.close(figure)
    return buffer.getvalue()


def write_report(out: Path, rows: list[Row], config: Any, name: str = "comparison") -> Path:
    """``name``.{json,md,png} under ``out``; returns the markdown table's path."""
    settings = f"budget {config.budget} generated samples per method; methods {', '.join(config.methods)}"
    if "oreo" in config.methods:
        settings += f"; OREO {config.oreo.rounds} round(s), reference {config.oreo.reference}"
    title = "OREO rounds" if name == "rounds" else "Comparison"
    markdown = f"# {title}\n\n{settings}; evaluation {config.evaluation.config}\n\n{table(rows)}"
    write_atomic(out / f"{name}.json", json.dumps({"settings": settings, "rows": [asdict(r) for r in rows]},
                                                   indent=2) + "\n")  # fmt: skip
    write_atomic(out / f"{name}.md", markdown)
    write_atomic(out / f"{name}.png", plot(rows))
    return out / f"{name}.md"
