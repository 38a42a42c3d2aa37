"""``rg-verl export``: a split as verl RLHF parquet that verl's own dataset reads and our reward scores as ours."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pyarrow.parquet as pq
import pytest
from omegaconf import OmegaConf
from transformers import AutoTokenizer
from verl.utils.dataset.rl_dataset import RLHFDataset

from rg_verl import cli
from rg_verl.common.compose import compose
from rg_verl.common.names import ANSWER_CLOSE, ANSWER_OPEN, SPLIT_SHARES, formatted
from rg_verl.common.schema import ConfigError
from rg_verl.cpu.tiny_model import build_tiny_model
from rg_verl.data import export
from rg_verl.data.dataset import ReasoningGymDataset
from rg_verl.data.export import export_split, reasoning_gym_section
from rg_verl.data.holdout import SALT, question_hash, split_of
from rg_verl.reward import compute_score
from tests.helpers import CONFIGS_DIR

pytestmark = pytest.mark.usefixtures("no_scoring_deadline")

SMOKE = str(CONFIGS_DIR / "smoke")


def mixed_section(math_data: Path, size: int = 12) -> dict:
    """Two generators and a file dataset (GSM8K, validation file only) in the validation mix."""
    gsm8k = {"source": {"format": "gsm8k", "val": str(math_data / "gsm8k" / "test.parquet")}}
    return {
        "datasets": {"chain_sum": {"weight": 1.0}},
        "val_datasets": {"chain_sum": {"weight": 1.0}, "leg_counting": {"weight": 1.0}, "gsm8k": gsm8k},
        "seed": 7,
        "val_size": size,
    }


SMALL = {"datasets": {"chain_sum": {"weight": 1.0}, "leg_counting": {"weight": 1.0}}, "val_size": 6, "eval_size": 5}


def ours(section: dict, split: str) -> ReasoningGymDataset:
    return ReasoningGymDataset(f"reasoning_gym://{split}", None, {"reasoning_gym": section})


def parquet_rows(out: Path, split: str) -> list[dict]:
    return pq.read_table(out / f"{split}.parquet").to_pylist()


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    """The tiny local model's tokenizer (its chat template included): verl's dataset tokenizes prompts."""
    return AutoTokenizer.from_pretrained(build_tiny_model(tmp_path_factory.mktemp("export") / "tiny"))


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The validation split of :data:`SMALL`, exported once with its ``hf`` folder."""
    return export_split(SMALL, "val", tmp_path_factory.mktemp("exported") / "val", hf=True)


# --- the round trip through verl's own dataset and our reward ----------------------------------------


def responses(answer: str) -> dict[str, str]:
    return {
        "right, formatted": formatted("thinking", answer),
        "right, lenient only": f"The answer is {ANSWER_OPEN}{answer}{ANSWER_CLOSE}.",
        "wrong, formatted": formatted("thinking", f"{answer}9"),
        "no answer": "I do not know.",
    }


def test_verls_rlhf_dataset_reads_the_export_and_our_reward_scores_it_as_ours(tmp_path, math_data, tokenizer):
    section = mixed_section(math_data)
    out = export_split(section, "val", tmp_path / "val")
    config = OmegaConf.create(
        {"max_prompt_length": 4096, "cache_dir": str(tmp_path / "cache"), "filter_overlong_prompts_workers": 1}
    )
    verl_rows = RLHFDataset([str(out / "val.parquet")], tokenizer, config)
    items = ours(section, "val")
    assert len(verl_rows) == len(items) == 12
    assert {items[i]["extra_info"]["dataset"] for i in range(len(items))} == {"chain_sum", "leg_counting", "gsm8k"}
    for index in range(len(items)):
        row, item = verl_rows[index], items[index]
        assert row["raw_prompt"] == item["raw_prompt"]
        assert row["data_source"] == item["data_source"]
        assert row["reward_model"] == item["reward_model"]
        assert row["ability"] == item["extra_info"]["category"]
        assert row["index"] == index and row["extra_info"]["question_hash"] == item["extra_info"]["question_hash"]
        assert isinstance(row["extra_info"]["entry"], str)  # one column type whatever the dataset's metadata
        answer = item["reward_model"]["ground_truth"]
        for name, response in responses(answer).items():
            for kwargs in ({"mode": "lenient"}, {"mode": "strict", "terms": {"format": 0.1}}):
                score = compute_score(item["data_source"], response, answer, item["extra_info"], **kwargs)
                truth = row["reward_model"]["ground_truth"]
                again = compute_score(row["data_source"], response, truth, row["extra_info"], **kwargs)
                assert again == score, (index, name, kwargs)
        right = compute_score(row["data_source"], formatted("t", answer), answer, row["extra_info"])
        assert right["score"] == 1.0  # the comparison above is not between two failures to score


def test_rows_follow_the_held_out_rule_and_carry_the_entry(exported):
    rows = parquet_rows(exported, "val")
    items = ours(SMALL, "val")
    for index, row in enumerate(rows):
        entry = json.loads(row["extra_info"]["entry"])
        assert entry == items[index]["extra_info"]["entry"]
        assert row["extra_info"]["question_hash"] == question_hash(entry["question"])
        assert split_of(entry["question"]) == "val"
        assert row["extra_info"]["split"] == "val" and row["extra_info"]["index"] == index


def test_the_hf_folder_loads_with_load_from_disk_and_holds_the_same_rows(exported):
    table = datasets.load_from_disk(str(exported / "hf"))
    assert [dict(row) for row in table] == parquet_rows(exported, "val")
    assert json.loads(table.info.description)["split"] == "val"


def test_manifest_and_parquet_metadata_record_the_config_seeds_and_rule(exported):
    manifest = json.loads((exported / "manifest.json").read_text())
    assert manifest["split"] == "val" and manifest["rows"] == manifest["split_size"] == 6
    assert manifest["seed"] == 42 and manifest["split_seed"] == ours(SMALL, "val").split_seed
    assert manifest["reasoning_gym"]["datasets"] == SMALL["datasets"]
    assert manifest["held_out_rule"]["salt"] == SALT.decode()
    assert manifest["held_out_rule"]["shares"] == SPLIT_SHARES
    assert manifest["versions"]["rg-verl"] and manifest["versions"]["reasoning-gym"]
    assert manifest["files"] == {"parquet": "val.parquet", "hf": "hf"}
    counts = manifest["datasets"]
    assert sum(c["items"] for c in counts.values()) == 6
    assert all(1 <= c["distinct_questions"] <= c["items"] for c in counts.values())
    header = json.loads(pq.read_schema(exported / "val.parquet").metadata[b"rg_verl"])
    assert header == {key: value for key, value in manifest.items() if key != "datasets"}
    assert json.loads(pq.read_metadata(exported / "val.parquet").metadata[b"rg_verl.datasets"]) == counts


def test_repeated_questions_are_counted_and_logged(tmp_path, caplog):
    one_digit = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}  # a few hundred questions
    section = {"datasets": {"chain_sum": {"config": one_digit}}, "val_size": 40}
    out = export_split(section, "val", tmp_path / "val")
    hashes = [row["extra_info"]["question_hash"] for row in parquet_rows(out, "val")]
    counts = json.loads((out / "manifest.json").read_text())["datasets"]
    assert counts == {"chain_sum": {"items": 40, "distinct_questions": len(set(hashes))}}
    assert len(set(hashes)) < 40
    assert f"chain_sum repeats questions in the val split: 40 items, {len(set(hashes))} distinct" in caplog.text


def test_a_composed_config_and_its_section_export_the_same_rows(tmp_path):
    config = compose(SMOKE, "cpu", ["reasoning_gym.eval_size=5"])
    assert reasoning_gym_section(config) == reasoning_gym_section(config.data)
    from_config = export_split(config, "eval", tmp_path / "a")
    from_section = export_split(reasoning_gym_section(config), "eval", tmp_path / "b")
    assert parquet_rows(from_config, "eval") == parquet_rows(from_section, "eval")
    assert len(parquet_rows(from_config, "eval")) == 5


def test_limit_exports_the_first_items(tmp_path, exported):
    out = export_split(SMALL, "val", tmp_path / "val", limit=4)
    assert parquet_rows(out, "val") == parquet_rows(exported, "val")[:4]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["rows"] == 4 and manifest["limit"] == 4 and manifest["split_size"] == 6


def test_a_hash_seed_dependent_generator_warns_without_pythonhashseed(tmp_path, monkeypatch, caplog):
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    section = {"datasets": {"isomorphic_strings": {}}, "val_size": 2}
    out = export_split(section, "val", tmp_path / "val")
    assert "PYTHONHASHSEED is not set: the items of isomorphic_strings" in caplog.text
    assert json.loads((out / "manifest.json").read_text())["python_hash_seed"] is None
    caplog.clear()
    monkeypatch.setenv("PYTHONHASHSEED", "0")
    out = export_split(section, "val", tmp_path / "again")
    assert "PYTHONHASHSEED" not in caplog.text
    assert json.loads((out / "manifest.json").read_text())["python_hash_seed"] == "0"


# --- the command line --------------------------------------------------------------------------------


def test_the_cli_exports_what_the_function_exports(tmp_path, capsys):
    argv = ["--config-path", SMOKE, "--config-name", "cpu", "--split", "val", "--limit", "3", "reasoning_gym.seed=5"]
    assert cli.main(["export", *argv, "--out", str(tmp_path / "cli"), "--hf"]) == 0
    assert "3 val items" in capsys.readouterr().out
    config = compose(SMOKE, "cpu", ["reasoning_gym.seed=5"])
    expected = parquet_rows(export_split(config, "val", tmp_path / "fn", limit=3), "val")
    assert parquet_rows(tmp_path / "cli", "val") == expected
    assert len(datasets.load_from_disk(str(tmp_path / "cli" / "hf"))) == 3
    assert json.loads((tmp_path / "cli" / "manifest.json").read_text())["seed"] == 5


def test_the_cli_help_names_its_options(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["export", "--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    options = ("rg-verl export", "--config-path", "--split", "--out", "--hf", "--limit", "--overwrite", "key=value")
    assert all(option in text for option in options), text


@pytest.mark.parametrize(
    "args, message",
    [
        (["--split", "test", "--out", "x"], "invalid choice: 'test'"),
        (["--split", "val"], "required: --out"),
        (["--hf"], "required: --split, --out"),
        (["--split", "val", "--out", "x", "--bogus"], "unrecognized arguments: --bogus"),
        (["-cp", "no/such/folder", "--split", "val", "--out", "x"], "config folder 'no/such/folder' not found"),
    ],
)
def test_cli_usage_errors_exit_2_naming_the_argument(args, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["export", *args])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_cli_bad_input_is_one_line_naming_the_fix(tmp_path, capsys):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    base = ["export", "--config-path", SMOKE, "--split", "val"]
    assert cli.main([*base, "--out", str(tmp_path / "full")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: out:") and "--overwrite" in err and err.count("\n") == 1
    assert cli.main([*base, "--out", str(tmp_path / "x"), "--limit", "0"]) == 1
    assert "limit: 0" in capsys.readouterr().err
    assert cli.main([*base, "--config-name", "no_such_config", "--out", str(tmp_path / "y")]) == 1
    assert "no_such_config" in capsys.readouterr().err
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


# --- bad input and atomic writes ---------------------------------------------------------------------


def test_an_unknown_split_names_the_splits(tmp_path):
    with pytest.raises(ConfigError, match=r"split: 'test' is not a split; use one of train, val, eval"):
        export_split(SMALL, "test", tmp_path / "out")


@pytest.mark.parametrize("limit", [0, -3, 2.5, True])
def test_a_bad_limit_is_an_error(tmp_path, limit):
    with pytest.raises(ConfigError, match=r"limit: .*positive number of items"):
        export_split(SMALL, "val", tmp_path / "out", limit=limit)


def test_a_config_without_a_reasoning_gym_section_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match=r"no reasoning_gym section .*pass a composed training config"):
        export_split({"trainer": {}}, "val", tmp_path / "out")


def test_an_output_under_a_file_names_the_file(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(NotADirectoryError, match=rf"out: {tmp_path / 'file'} is a file"):
        export_split(SMALL, "val", tmp_path / "file" / "sub" / "out")
    with pytest.raises(FileExistsError, match=r"is a file; choose a folder for --out, or pass --overwrite"):
        export_split(SMALL, "val", tmp_path / "file")


def test_a_non_empty_output_needs_overwrite_then_is_replaced_whole(tmp_path, exported):
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("old")
    with pytest.raises(FileExistsError, match=r"exists and is not empty; pass --overwrite"):
        export_split(SMALL, "val", out)
    assert (out / "old.txt").read_text() == "old"
    export_split(SMALL, "val", out, overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "val.parquet"]
    assert parquet_rows(out, "val") == parquet_rows(exported, "val")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert export_split(SMALL, "val", empty, limit=1) == empty  # an empty folder is no obstacle


def test_a_failed_export_leaves_nothing_at_the_target(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("disk gone")

    monkeypatch.setattr(export, "_write_hf", broken)
    with pytest.raises(RuntimeError, match="disk gone"):
        export_split(SMALL, "val", tmp_path / "new", hf=True)
    assert list(tmp_path.iterdir()) == []  # no output, no staging folder
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "keep.txt").write_text("kept")
    with pytest.raises(RuntimeError, match="disk gone"):
        export_split(SMALL, "val", tmp_path / "old", hf=True, overwrite=True)
    assert [p.name for p in tmp_path.iterdir()] == ["old"]
    assert [p.name for p in (tmp_path / "old").iterdir()] == ["keep.txt"]
