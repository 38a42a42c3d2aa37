"""The comparison's table and plot, from the evaluator's results files."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rg_verl.compare.config import load
from rg_verl.compare.report import Row, table, write_report
from rg_verl.compare.stages import StageError
from tests.helpers import REPO


def results(tmp_path, name, **metrics):
    path = tmp_path / name / "results.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"metrics": metrics}))
    return path


def test_rows_read_the_overall_metrics_and_the_table_shows_differences_to_the_start(tmp_path):
    start = Row.read("start", "sample", 0, None, results(tmp_path, "a", format_rate=0.25, accuracy=0.0))
    grpo = Row.read("grpo", "sample", 384, None, results(tmp_path, "b", format_rate=0.75, accuracy=0.125))
    greedy = Row.read("grpo", "greedy", 384, None, results(tmp_path, "c", format_rate=1.0, accuracy=0.5))
    rerank = Row.read("oreo", "value_rerank", 384, 1, results(tmp_path, "d", format_rate=0.5, accuracy=0.0))
    text = table([start, grpo, greedy, rerank])
    lines = text.splitlines()
    assert lines[2].startswith("| start | sample | 0 | 25.0 |  |")
    assert "| grpo | sample | 384 | 75.0 | +50.0 | 12.5 | +12.5 |" in lines[3]
    assert "| grpo | greedy | 384 | 100.0 |  | 50.0 |  |" in lines[4]  # no greedy start: no difference
    assert "| oreo | value_rerank | 384 | 50.0 | +25.0 |" in lines[5]  # value modes: against the sampled start


def test_a_broken_results_file_names_itself(tmp_path):
    path = tmp_path / "results.json"
    path.write_text("{")
    with pytest.raises(StageError, match="results.json"):
        Row.read("grpo", "sample", 1, None, path)


def test_write_report_writes_the_table_its_rows_and_a_png(tmp_path):
    config = load(REPO / "configs" / "compare" / "learn_cpu.yaml")
    rows = [Row.read("start", "sample", 0, None, results(tmp_path, "a", format_rate=0.5, accuracy=0.25))]
    path = write_report(tmp_path, rows, config)
    assert path.read_text().startswith("# Comparison\n\nbudget 384 generated samples per method")
    assert json.loads((tmp_path / "comparison.json").read_text())["rows"][0]["metrics"]["format_rate"] == 0.5
    assert (tmp_path / "comparison.png").read_bytes().startswith(b"\x89PNG")


@given(st.lists(st.one_of(st.none(), st.floats(0, 1)), min_size=2, max_size=2))
def test_any_metric_values_make_one_line_per_row(values):
    rows = [Row("start", "sample", 0, None, {"format_rate": values[0], "accuracy": values[1], "mean_score": None,
                                              "mean_response_tokens": None}, ""),
            Row("oreo", "sample", 8, 1, {"format_rate": values[1], "accuracy": values[0], "mean_score": 0.5,
                                          "mean_response_tokens": 3.0}, "")]  # fmt: skip
    lines = table(rows).splitlines()
    assert len(lines) == 4 and all(line.count("|") == 10 for line in lines)
