"""The comparison config: every shipped one loads, the budget splits into whole steps and items, and a bad
field fails before any stage runs, naming the field."""

from __future__ import annotations

import pytest

from rg_verl.common.compose import compose
from rg_verl.common.schema import ConfigError
from rg_verl.compare.config import load, only_oreo, plan
from tests.helpers import REPO

SHIPPED = sorted((REPO / "configs" / "compare").glob("*.yaml"))


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_shipped_configs_load_and_split_their_budget(path):
    config = load(path)
    train = compose(str(REPO / config.train.config_path), config.train.config_name, config.train.overrides)
    split = plan(config, train)
    per_step = train.data.train_batch_size * train.actor_rollout_ref.rollout.n
    if "grpo" in config.methods:
        assert split.grpo_steps * per_step == config.budget
    assert split.items_per_round * config.samples * config.oreo.rounds == config.budget
    assert (REPO / config.evaluation.config).is_file()


def test_the_cpu_config_matches_the_learning_checks_budget():
    config = load(REPO / "configs" / "compare" / "learn_cpu.yaml")
    train = compose(str(REPO / "configs" / "smoke"), "learn", [])
    assert plan(config, train).grpo_steps == train.trainer.total_training_steps == 12


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("methods=[grpo,dpo]", "methods"),
        ("methods=[rft]", "methods"),
        ("evaluation.decodings=[beam]", "evaluation.decodings"),
        ("budget=100", "budget"),
        ("oreo.reference=latest", "oreo.reference"),
        ("oreo.rounds=0", "oreo.rounds"),
        ("device=tpu", "device"),
        ("nonsense=1", "nonsense"),
    ],
)
def test_a_bad_field_is_named(override, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        load(REPO / "configs" / "compare" / "learn_cpu.yaml", [override])


def test_a_budget_that_is_not_whole_grpo_steps_is_named():
    config = load(REPO / "configs" / "compare" / "learn_cpu.yaml", ["budget=48", "samples=8"])
    train = compose(str(REPO / "configs" / "smoke"), "learn", [])
    with pytest.raises(ConfigError, match="budget: 48 samples are not whole GRPO steps"):
        plan(config, train)


def test_a_missing_file_names_the_option(tmp_path):
    with pytest.raises(ConfigError, match="--config"):
        load(tmp_path / "missing.yaml")


def test_iterate_runs_the_oreo_arm_alone():
    config = only_oreo(load(REPO / "configs" / "compare" / "learn_cpu.yaml", ["oreo.rounds=2", "budget=384"]))
    assert config.methods == ["oreo"] and config.oreo.rounds == 2


def test_the_demo_is_the_cpu_comparisons_grpo_arm():
    """tests/e2e/conftest.py lets the CPU comparison continue the demo's folder: that is sound only while the demo
    trains and evaluates exactly what the comparison's GRPO arm and its sampled rows do."""
    demo = load(REPO / "configs" / "compare" / "demo_cpu.yaml")
    comparison = load(REPO / "configs" / "compare" / "learn_cpu.yaml")
    assert demo.methods == ["grpo"] and demo.evaluation.decodings == ["sample"]
    assert "sample" in comparison.evaluation.decodings
    for field in ("device", "gpus", "budget", "train"):
        assert getattr(demo, field) == getattr(comparison, field), field
    assert demo.evaluation.config == comparison.evaluation.config
