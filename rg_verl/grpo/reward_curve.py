"""Reward curves as PNG images (``reward_curve.png``, values in ``reward_curve.json``), from verl's logged metrics.

    python -m rg_verl.grpo.reward_curve metrics.jsonl reward_curve.png
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from rg_verl.common.atomic import write_atomic

logger = logging.getLogger(__name__)

# verl's mean sequence reward of a training step
REWARD_KEY = "critic/score/mean"


def read_metrics(path: str | os.PathLike) -> dict[int, dict]:
    """verl's file-logger JSONL (one ``{"step", "data"}`` object a line) as step -> merged metrics."""
    merged: dict[int, dict] = {}
    for line in Path(path).read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            merged.setdefault(int(row["step"]), {}).update(row["data"])
    return merged


def metric_history(metrics: Mapping[int, Mapping], key: str = REWARD_KEY) -> dict[int, float]:
    """step -> value of ``key``, for the steps that logged it, in step order."""
    return {step: float(metrics[step][key]) for step in sorted(metrics) if key in metrics[step]}


def plot_reward_curve(
    history: Mapping[int, float] | Iterable[tuple[int, float]],
    path: str | os.PathLike,
    *,
    title: str = "training reward",
    label: str = REWARD_KEY,
    window: int = 5,
) -> Path:
    """Draw the reward per step and its trailing mean over ``window`` steps into a PNG at ``path``, atomically."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    points = sorted(dict(history).items())
    steps = [step for step, _ in points]
    values = [value for _, value in points]
    fig = Figure(figsize=(6, 3.5), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.plot(steps, values, marker="o", markersize=3, linewidth=1, label=label)
    if len(values) >= 2 and window > 1:
        trailing = [_mean(values[max(0, i + 1 - window) : i + 1]) for i in range(len(values))]
        ax.plot(steps, trailing, linewidth=2, label=f"mean of last {window} steps")
    ax.set_xlabel("training step")
    ax.set_ylabel("reward")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if values:
        ax.legend(loc="best", fontsize="small")
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png")
    write_atomic(path, png.getvalue())
    return Path(path)


class RewardCurve:
    """A run's reward per step in ``<out_dir>/reward_curve.json``, continued on resume; a failed write only warns."""

    PNG = "reward_curve.png"
    JSON = "reward_curve.json"

    def __init__(self, out_dir: str | os.PathLike, title: str = "training reward"):
        self.out_dir = Path(out_dir)
        self.title = title
        self.history: dict[int, float] | None = None  # read from disk at the first add

    def _saved(self, before_step: int) -> dict[int, float]:
        saved = self.out_dir / self.JSON
        if not saved.is_file():
            return {}
        return {int(k): v for k, v in json.loads(saved.read_text()).items() if int(k) < before_step}

    def add(self, step: int, reward: float) -> None:
        """Record ``reward`` at ``step``, then rewrite the JSON and the PNG (each atomically)."""
        try:
            if self.history is None:
                self.history = self._saved(step)
            self.history[step] = reward
            values = {str(k): v for k, v in sorted(self.history.items())}
            write_atomic(self.out_dir / self.JSON, json.dumps(values))
            plot_reward_curve(self.history, self.out_dir / self.PNG, title=self.title)
        except Exception as error:
            logger.warning("could not draw the reward curve into %s: %r", self.out_dir, error)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def main(argv: Sequence[str] | None = None) -> None:
    """Command line: ``python -m rg_verl.grpo.reward_curve METRICS_JSONL OUT_PNG [--key KEY]``."""
    parser = argparse.ArgumentParser(description="Plot a metric of a verl file-logger JSONL against the step.")
    parser.add_argument("metrics", type=Path, help="verl's file-logger output (VERL_FILE_LOGGER_PATH)")
    parser.add_argument("out", type=Path, help="PNG to write")
    parser.add_argument("--key", default=REWARD_KEY, help=f"metric to plot (default {REWARD_KEY})")
    args = parser.parse_args(argv)
    history = metric_history(read_metrics(args.metrics), args.key)
    if not history:
        parser.error(f"{args.metrics} logged no {args.key!r}")
    print(plot_reward_curve(history, args.out, label=args.key))


if __name__ == "__main__":
    main()
