"""Tests of ``items: reference`` (rg_verl.evaluation.items): reasoning-gym's own evaluation items, reported and
resumed beside the evaluation split's, and counted against reasoning-gym's training composite."""

from __future__ import annotations

import json

import pytest
import reasoning_gym
from reasoning_gym.composite import DatasetSpec

from rg_verl.common.schema import ConfigError
from rg_verl.data import reference_questions
from rg_verl.data.holdout import question_hash, split_of
from rg_verl.evaluation import evaluate, parse_config
from rg_verl.evaluation.cli import main as cli_main
from rg_verl.evaluation.items import eval_datasets
from tests.unit.evaluation.fakes import NUM_ITEMS, ScriptedBackend, answers_by_question, small_config

# a space of 10 * 10 * 2 questions: a training composite of a few hundred items holds many of them
SMALL = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}


def run(config: dict, **kwargs):
    parsed = parse_config(config)
    backend = ScriptedBackend(answers_by_question(parsed))
    run_dir = evaluate(parsed, backend=backend, **kwargs)
    return run_dir, json.loads((run_dir / "results.json").read_text()), backend


def by_name(results: dict) -> dict[str, dict]:
    return {d["name"]: d for c in results["categories"] for d in c["datasets"]}


def test_reference_items_are_create_datasets_items_and_keyed_apart_from_the_split():
    split = eval_datasets(parse_config(small_config()))
    reference = eval_datasets(parse_config(small_config(items="reference")))
    for ds_split, ds in zip(split, reference, strict=True):
        entry = ds.entry
        expected = list(reasoning_gym.create_dataset(entry.dataset, seed=entry.seed, size=entry.size, **entry.params))
        assert ds.kind == "reference" and ds_split.kind == "split" and len(ds) == entry.size
        assert [ds[i]["extra_info"]["entry"] for i in range(len(ds))] == json.loads(json.dumps(expected))
        assert [ds[i]["reward_model"]["ground_truth"] for i in range(len(ds))] == [str(e["answer"]) for e in expected]
        assert ds[0]["data_source"] == f"reasoning_gym/{entry.dataset}"
        keys = {ds.item_key(i) for i in range(len(ds))}
        assert len(keys) == len(ds) and not keys & {ds_split.item_key(i) for i in range(len(ds_split))}


def test_an_entry_overrides_the_config_and_a_file_dataset_ignores_it(math_data):
    config = small_config(items="reference")
    config["categories"][0]["datasets"][1]["items"] = "split"
    gsm8k = {"format": "gsm8k", "eval": str(math_data / "gsm8k/train.parquet")}
    config["categories"].append({"category": "math", "datasets": [{"dataset": "gsm8k", "size": 3, "source": gsm8k}]})
    assert [ds.kind for ds in eval_datasets(parse_config(config))] == ["reference", "split", "reference", "file"]


def test_the_command_lines_items_replace_every_entrys(tmp_path):
    import yaml

    from rg_verl.evaluation.config import load_config

    config = small_config(items="reference")
    config["categories"][0]["datasets"][1]["items"] = "reference"
    path = tmp_path / "eval.yaml"
    path.write_text(yaml.safe_dump(config))
    assert {ds.kind for ds in eval_datasets(load_config(path, items="split"))} == {"split"}
    assert {ds.kind for ds in eval_datasets(load_config(path))} == {"reference"}


@pytest.mark.parametrize(
    "where, value, message",
    [
        ("items", "references", r"^items: 'references' is not a kind of items; set one of split, reference"),
        ("entry", "ref", r"^categories\[0\]\.datasets\[0\]\.items: 'ref' is not a kind of items"),
        ("reference_training", {"datasets": {"ab": {"weight": -1}}}, r"^reference_training\.datasets\.ab\.weight"),
    ],
)
def test_bad_items_fields_name_the_field(where, value, message):
    config = small_config()
    if where == "entry":
        config["categories"][0]["datasets"][0]["items"] = value
    else:
        config[where] = value
    with pytest.raises(ConfigError, match=message):
        parse_config(config)


def test_results_and_summary_say_which_items_each_dataset_used(tmp_path):
    config = small_config(output_dir=str(tmp_path), items="reference")
    config["categories"][1]["datasets"][0]["items"] = "split"
    run_dir, results, _ = run(config)
    datasets = by_name(results)
    assert {name: d["items"] for name, d in datasets.items()} == {
        "chain_sum": "reference",
        "leg_counting": "reference",
        "spell_backward": "split",
    }
    assert results["metadata"]["items"] == "reference" and results["metrics"]["accuracy"] == 1.0
    assert "in_reference_training" not in datasets["chain_sum"]  # not asked for
    summary = (run_dir / "summary.md").read_text()
    assert "- arithmetic/chain_sum: reasoning-gym's own items (create_dataset)" in summary
    assert "- algorithmic/spell_backward: rg-verl's evaluation split" in summary


def test_resume_keeps_the_two_kinds_of_items_apart(tmp_path):
    config = small_config(output_dir=str(tmp_path), run_name="both")
    first, _, _ = run(config)
    run_dir, results, backend = run({**config, "items": "reference"}, resume=True)
    assert run_dir == first and sum(backend.calls) == NUM_ITEMS  # none of the split's items stands in
    assert {d["items"] for d in by_name(results).values()} == {"reference"}
    records = [json.loads(line) for line in (run_dir / "items.jsonl").read_text().splitlines()]
    assert len(records) == 2 * NUM_ITEMS and len({r["key"] for r in records}) == 2 * NUM_ITEMS
    for items in ("reference", "split"):
        _, results, backend = run({**config, "items": items}, resume=True)
        assert backend.calls == [] and results["metrics"]["num_items"] == NUM_ITEMS


def test_in_reference_training_counts_the_items_the_composite_holds(tmp_path):
    mix = {"leg_counting": {"weight": 1}, "chain_sum": {"weight": 2, "config": SMALL}}
    specs = [DatasetSpec(name, spec["weight"], spec.get("config", {})) for name, spec in mix.items()]
    composite = reasoning_gym.create_dataset("composite", seed=1, size=300, datasets=specs)
    trained = {question_hash(composite[i]["question"]) for i in range(300)}
    config = small_config(
        output_dir=str(tmp_path),
        items="reference",
        reference_training={"datasets": mix, "size": 300},
        categories=[
            {"category": "arithmetic", "datasets": [{"dataset": "chain_sum", "size": 30, "seed": 42, "params": SMALL}]},
            {"category": "algorithmic", "datasets": [{"dataset": "spell_backward", "size": 2}]},
        ],
    )
    run_dir, results, _ = run(config)
    datasets = by_name(results)
    expected = sum(question_hash(r["question"]) in trained for r in datasets["chain_sum"]["results"])
    assert datasets["chain_sum"]["in_reference_training"] == expected > 10  # the small space repeats
    assert datasets["spell_backward"]["in_reference_training"] == 0  # not in the training mix
    assert f"{expected} of 30 are reasoning-gym training questions" in (run_dir / "summary.md").read_text()


def test_rg_verl_trainable_counts_reference_questions_the_list_does_not_hold(tmp_path, monkeypatch):
    config = small_config(output_dir=str(tmp_path), items="reference")
    monkeypatch.setattr(reference_questions, "shipped_hashes", lambda: frozenset())
    _, results, _ = run(config)
    datasets = by_name(results)
    for d in datasets.values():
        assert d["rg_verl_trainable"] == sum(split_of(r["question"]) == "train" for r in d["results"])
    assert sum(d["rg_verl_trainable"] for d in datasets.values()) > 0
    listed = frozenset(question_hash(r["question"]) for d in datasets.values() for r in d["results"])
    monkeypatch.setattr(reference_questions, "shipped_hashes", lambda: listed)
    _, results, _ = run({**config, "run_name": "listed"})
    assert all(d["rg_verl_trainable"] == 0 for d in by_name(results).values())


def test_tiny_model_evaluates_reference_items_end_to_end(tiny_model, tmp_path):
    config = small_config(model_path=str(tiny_model), output_dir=str(tmp_path / "out"), device="cpu", items="reference")
    config["categories"] = config["categories"][:1]
    path = tmp_path / "tiny.yaml"
    path.write_text(json.dumps(config))  # JSON is YAML
    assert cli_main(["--config", str(path), "--run-name", "ref"]) == 0
    results = json.loads((tmp_path / "out" / "ref" / "results.json").read_text())
    datasets = by_name(results)
    assert [(n, d["items"], d["total_examples"]) for n, d in datasets.items()] == [
        ("chain_sum", "reference", 3),
        ("leg_counting", "reference", 2),
    ]
    expected = list(reasoning_gym.create_dataset("leg_counting", seed=1, size=2))
    assert [r["question"] for r in datasets["leg_counting"]["results"]] == [e["question"] for e in expected]
