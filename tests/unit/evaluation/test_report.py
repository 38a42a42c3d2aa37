"""Tests of rg_verl.evaluation.report: results.json's structure and the summary's tables, from finished items."""

from __future__ import annotations

import json

from rg_verl.evaluation.config import parse_config
from rg_verl.evaluation.items import eval_datasets
from rg_verl.evaluation.metrics import aggregate
from rg_verl.evaluation.report import build_results, summary_markdown, write_reports
from tests.unit.evaluation.fakes import small_config


def records_of(config) -> dict[str, dict]:
    """A finished record per item: the first completion right, the second wrong."""
    records = {}
    for dataset in eval_datasets(config):
        for i in range(len(dataset)):
            completions = [
                {"score": 1.0, "accuracy": 1.0, "model_answer": "a", "num_tokens": 3},
                {"score": 0.0, "accuracy": 0.0, "model_answer": "b", "num_tokens": 5},
            ]
            records[dataset.item_key(i)] = {"key": dataset.item_key(i), "index": i, "question": f"q{i}",
                                            "expected_answer": "a", "best_score": 1.0, "mean_score": 0.5,
                                            "completions": completions}  # fmt: skip
    return records


def test_results_pool_items_per_dataset_per_category_and_overall():
    config = parse_config(small_config(k_values=[1, 2]))
    datasets = eval_datasets(config)
    records = records_of(config)
    del records["arithmetic/chain_sum/2"]  # an unfinished item is left out, not counted as wrong
    results = build_results(config, datasets, records, metadata={"model": "m"})
    assert results["metadata"] == {"model": "m"}
    assert [c["name"] for c in results["categories"]] == ["arithmetic", "algorithmic"]
    chain_sum = results["categories"][0]["datasets"][0]
    assert (chain_sum["name"], chain_sum["category"], chain_sum["total_examples"]) == ("chain_sum", "arithmetic", 2)
    assert chain_sum["config"] == {"min_terms": 2, "max_terms": 2, "size": 3, "seed": 1}
    assert [item["index"] for item in chain_sum["results"]] == [0, 1] and "key" not in chain_sum["results"][0]
    assert chain_sum["average_score"] == 0.5 and chain_sum["metrics"]["pass@2"] == 1.0
    everything = [r["completions"] for r in records.values()]
    assert results["metrics"] == aggregate(everything, [1, 2]) and results["metrics"]["num_items"] == 6

    lean = parse_config(small_config(save_metadata=False, save_full_results=False))
    results = build_results(lean, datasets, records, metadata={"model": "m"})
    assert "metadata" not in results and "results" not in results["categories"][0]["datasets"][0]


def test_summary_has_an_overall_table_and_one_per_category(tmp_path):
    config = parse_config(small_config(k_values=[1, 2]))
    results = build_results(config, eval_datasets(config), records_of(config), metadata={})
    summary = summary_markdown(results, config)
    assert summary.startswith("# Evaluation: eval\n")
    assert summary.count("| category |") == 1 and summary.count("| dataset |") == 2
    assert "| pass@2 |" in summary and "| pass@1 |" not in summary  # pass@1 is the accuracy column
    assert "| **all** | 7 | 50.0 | 50.0 |" in summary
    write_reports(tmp_path, results, config)
    assert json.loads((tmp_path / "results.json").read_text()) == results
    assert (tmp_path / "summary.md").read_text() == summary
    assert (tmp_path / "scores.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_a_short_evaluation_space_is_reported_per_dataset(caplog):
    # lcm of two numbers in 1..3 has 9 questions, none in the evaluation share: it is evaluated on no item;
    # gcd of two numbers in 1..8 has 64, one in the evaluation share: its 4 items repeat it
    tiny = {"min_numbers": 2, "max_numbers": 2, "min_value": 1, "max_value": 3}
    categories = [
        {"category": "arithmetic", "datasets": [
            {"dataset": "lcm", "size": 4, "seed": 1, "params": tiny},
            {"dataset": "gcd", "size": 4, "seed": 1, "params": {**tiny, "max_value": 8}},
            {"dataset": "chain_sum", "size": 3, "seed": 1},
        ]},
    ]  # fmt: skip
    config = parse_config(small_config(categories=categories))
    with caplog.at_level("WARNING"):
        datasets = eval_datasets(config)
    assert [len(d) for d in datasets] == [0, 4, 3]
    assert "arithmetic/lcm: evaluated on no item" in caplog.text and "hold no question in the eval share" in caplog.text
    records = {}
    for dataset in datasets:
        for i in range(len(dataset)):
            question = dataset[i]["raw_prompt"][-1]["content"]
            completions = [{"score": 1.0, "accuracy": 1.0, "model_answer": "a", "num_tokens": 3}]
            records[dataset.item_key(i)] = {"key": dataset.item_key(i), "index": i, "question": question,
                                            "completions": completions}  # fmt: skip
    results = build_results(config, datasets, records, metadata={})
    lcm, gcd, chain_sum = results["categories"][0]["datasets"]
    assert (lcm["total_examples"], lcm["distinct_questions"], lcm["space_short"]) == (0, 0, True)
    assert (gcd["total_examples"], gcd["distinct_questions"], gcd["space_short"]) == (4, 1, True)
    assert (chain_sum["total_examples"], chain_sum["distinct_questions"], chain_sum["space_short"]) == (3, 3, False)
    summary = summary_markdown(results, config)
    assert "## Datasets whose evaluation share ran short" in summary
    assert "- arithmetic/lcm: 0 items of 4 asked for, 0 distinct questions" in summary
    assert "- arithmetic/gcd: 4 items of 4 asked for" in summary and "chain_sum: 3 items" not in summary
