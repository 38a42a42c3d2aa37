"""OREO configs: composed from the base and verl's groups, checked before any model loads."""

from __future__ import annotations

import json

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from rg_verl.common.schema import ConfigError, field_docs
from rg_verl.oreo.config import OreoConfig, OreoDataConfig, OreoTrainerConfig, validate, verl_sections
from tests.helpers import REPO

OREO_CONFIGS = sorted(p.stem for p in (REPO / "configs" / "oreo").glob("*.yaml") if not p.stem.startswith("_"))


def composed(name: str, *overrides: str):
    with initialize_config_dir(config_dir=str(REPO / "configs" / "oreo"), version_base=None):
        return compose(name, overrides=list(overrides))


@pytest.fixture
def model_dir(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"vocab_size": 1024}))
    return folder


@pytest.fixture
def files(tmp_path):
    folder = tmp_path / "trajectories" / "train"
    folder.mkdir(parents=True)
    (folder.parent / "val").mkdir()
    return folder


def smoke(model_dir, files, *overrides):
    return composed(
        "smoke_cpu", f"actor.model.path={model_dir}", f"data.train_files=[{files}]",
        f"data.val_files=[{files.parent / 'val'}]", *overrides,
    )  # fmt: skip


def test_smoke_config_validates(model_dir, files):
    settings = validate(smoke(model_dir, files), ranks=1)
    assert settings.oreo.variant == "token" and settings.oreo.beta == 0.03 and settings.oreo.alpha == 0.01
    assert settings.trainer.device == "cpu"


@pytest.mark.parametrize("name", OREO_CONFIGS)
def test_every_shipped_config_composes_and_its_sections_parse(name, tiny_model, files):
    config = composed(
        name, f"actor.model.path={tiny_model}", f"critic.model.path={tiny_model}", f"data.train_files=[{files}]",
        f"data.val_files=[{files.parent / 'val'}]",
    )
    settings = validate(config, ranks=1)
    assert settings.data.train_batch_size % settings.data.micro_batch_size_per_gpu == 0
    # verl's own dataclasses accept the model, engine and optim groups
    for role in ("actor", "critic"):
        sections = verl_sections(config[role])
        assert sections["optim"].lr > 0


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("oreo.variant=tokens", "oreo.variant"),
        ("oreo.beta=-1", "oreo.beta"),
        ("oreo.kl_type=full", "oreo.kl_type"),
        ("+oreo.betta=0.1", "oreo.betta"),
        ("oreo.reward.kye=x", None),
        ("data.train_batch_size=6", "data.train_batch_size"),
        ("oreo.balance=0", "oreo.balance"),
        ("trainer.resume_mode=resume_path", "trainer.resume_from_path"),
        ("trainer.device=tpu", "trainer.device"),
        ("actor.engine.strategy=fsdp", "actor.engine.strategy"),
    ],
)
def test_bad_fields_are_named(model_dir, files, override, field):
    if field is None:
        override, field = "+oreo.reward.kye=x", "oreo.reward.kye"
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        validate(smoke(model_dir, files, override), ranks=1)


def test_step_variant_needs_a_delimiter(model_dir, files):
    with pytest.raises(ConfigError, match="oreo.step_delimiters"):
        validate(smoke(model_dir, files, "oreo.variant=step", "oreo.step_delimiters=['']"), ranks=1)


def test_batch_must_split_over_ranks(model_dir, files):
    config = smoke(model_dir, files, "data.train_batch_size=12")
    validate(config, ranks=1)
    with pytest.raises(ConfigError, match="data.train_batch_size: 12 .* 2 rank"):
        validate(config, ranks=2)


def test_missing_trajectory_files_name_the_collect_command(model_dir, files, tmp_path):
    config = composed("smoke_cpu", f"actor.model.path={model_dir}", f"data.train_files=[{tmp_path / 'none'}]")
    with pytest.raises(ConfigError, match=r"data.train_files\[0\].*rg-verl oreo collect"):
        validate(config, ranks=1)
    config = composed("smoke_cpu", f"actor.model.path={model_dir}", f"data.train_files=[{files}]",
                      f"data.val_files=[{tmp_path / 'none'}]")  # fmt: skip
    with pytest.raises(ConfigError, match=r"data.val_files\[0\].*rg-verl oreo collect"):
        validate(config, ranks=1)


def test_value_model_with_another_vocabulary_is_refused(model_dir, files, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"vocab_size": 2048}))
    with pytest.raises(ConfigError, match="critic.model.path: the value model's vocabulary"):
        validate(smoke(model_dir, files, f"critic.model.path={other}"), ranks=1)


def test_missing_model_is_refused(files, tmp_path):
    with pytest.raises(ConfigError, match="actor.model.path"):
        validate(smoke(tmp_path / "absent", files), ranks=1)


BASE = REPO / "rg_verl" / "conf" / "oreo_base.yaml"


def _comments_above(section: str) -> dict[str, str]:
    """field path -> the comment line right above it in the base YAML, for one section."""
    lines = BASE.read_text().splitlines()
    found, path, comment = {}, [], None
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("#"):
            comment = stripped.lstrip("# ")
            continue
        if not stripped or ":" not in stripped:
            continue
        depth = (len(line) - len(line.lstrip())) // 2
        key = stripped.split(":")[0]
        path = path[:depth] + [key]
        if path[0] == section and len(path) > 1 and comment is not None:
            found[".".join(path[1:])] = comment
        comment = None
    return found


@pytest.mark.parametrize(
    ("section", "cls"), [("oreo", OreoConfig), ("data", OreoDataConfig), ("trainer", OreoTrainerConfig)]
)
def test_base_yaml_documents_every_field_with_its_help_and_default(section, cls):
    base = OmegaConf.to_container(OmegaConf.load(BASE))[section]
    comments = _comments_above(section)
    for doc in field_docs(cls):
        assert comments.get(doc.name) == doc.help, f"{section}.{doc.name}: the comment above it must be its help"
        value = base
        for part in doc.name.split("."):
            value = value[part]
        if not (isinstance(value, str) and "${" in value):
            assert value == doc.default, f"{section}.{doc.name}: base YAML {value!r}, declared {doc.default!r}"
