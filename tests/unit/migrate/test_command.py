"""rg-verl migrate-config end to end: a config in the reference's schema becomes an rg-verl config that composes
with Hydra, passes our checks and verl's, and dry-runs; training refuses a reference config before Ray.

The reference is reasoning-gym's ``training/`` folder at commit 49b0713. Its shipped training configs are
written below as data (:data:`REFERENCE`: the keys the comparisons need, as the files spell them), so the
tests run anywhere. With ``RG_VERL_REFERENCE_REPO`` set to a reasoning-gym git repository (a clone or a
bare mirror) a test also checks that data against the files and migrates the whole files.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from rg_verl.common import names
from rg_verl.common.schema import ConfigError
from rg_verl.config import validate
import rg_verl.api
from rg_verl.migrate.cli import main
from rg_verl.migrate.command import COMMAND, migrate, reference_schema_keys, render, write_config
from rg_verl.migrate.tree import flatten, get, put, same
from tests.helpers import REPO
from tests.unit.test_shipped_configs import CONFIGS_DIR, composed, verl_validate

# GRPO has no critic, as intended: verl's check says so for every config
pytestmark = pytest.mark.filterwarnings("ignore:Disabled critic")

RG_VERL = Path(sys.executable).parent / "rg-verl"
REFERENCE_COMMIT = "49b0713"


def expand(flat: dict) -> dict:
    """A nested config from ``{"a.b": value}``."""
    tree: dict = {}
    for path, value in flat.items():
        put(tree, path, value)
    return tree


def migrated(folder: Path, old: dict, name: str = "migrated") -> tuple[Path, list]:
    """Migrate ``old`` into ``folder/<name>.yaml``; the path and what was not carried over."""
    new, unmapped = migrate(old)
    path = folder / f"{name}.yaml"
    write_config(path, render(new, unmapped, source="old.yaml"))
    return path, unmapped


def checked(path: Path):
    """The composed config at ``path`` (from outside the repository), after our checks and verl's."""
    config = composed(path)
    validate(config)
    verl_validate(composed(path))
    return config


# --- one config per section of the reference's schema -------------------------------------------------------

# every reference config names its model (our defaults hold verl's placeholder)
MODEL = {"actor_rollout_ref": {"model": {"path": "Qwen/Qwen2.5-3B-Instruct"}}}
SECTIONS = {
    "reasoning_gym": {
        **MODEL,
        "reasoning_gym": {
            "dataset_size": 640,
            "developer_prompt": "DeepSeekZero",
            "datasets": {"leg_counting": {"weight": 1, "config": {"max_animals": 4}}, "chain_sum": {"weight": 3}},
        },
    },
    "curriculum": {
        **MODEL,
        "reasoning_gym": {"dataset_size": 640, "developer_prompt": "DeepSeekZero", "datasets": None},
        "curriculum": {
            "enabled": True,
            "schedule": {"automatic": True, "update_steps": 30},
            "last_k": 64,
            "success_threshold": 0.7,
            "failure_threshold": 0.2,
            "curricula": {"knights_knaves": {"attribute_levels": {"n_people": 0, "depth_constraint": 0}}},
        },
    },
    "reward": {
        **MODEL,
        "reasoning_gym": {"datasets": {"leg_counting": {"weight": 1}}},
        "reward": {
            "use_accuracy": True,
            "secondary_rewards": [
                {"name": "cosine", "scaling_factor": 0.3},
                {"name": "format", "scaling_factor": 0.2, "kwargs": {"preappend_thinking_token": True}},
            ],
        },
    },
    "old_verl": {
        "reasoning_gym": {"datasets": {"leg_counting": {"weight": 1}}},
        "data": {"train_files": "train.parquet", "max_response_length": 1024},
        "actor_rollout_ref": {
            "model": {"path": "Qwen/Qwen2.5-3B-Instruct"},
            "actor": {"optim": {"warmup_style": "cosine", "lr_warmup_steps_ratio": 0.1, "min_lr_ratio": None}},
            "rollout": {"load_format": "dummy_dtensor", "use_fire_sampling": False},
        },
        "trainer": {"val_generations_to_log_to_wandb": 4, "remove_previous_ckpt_in_save": True},
    },
    "unknown": {
        **MODEL,
        "reasoning_gym": {"datasets": {"leg_counting": {"weight": 1}}, "mystery": 1},
        "trainer": {"no_such_knob": 3},
        "verbose": True,
    },
}


@pytest.mark.parametrize("name", SECTIONS)
def test_each_section_migrates_composes_and_passes_our_checks_and_verls(tmp_path, name):
    path, _ = migrated(tmp_path, SECTIONS[name])
    config = checked(path)
    # our section reaches verl's dataset through data.reasoning_gym
    assert config.data.reasoning_gym.datasets


def test_the_migrated_sections_mean_what_the_old_ones_did(tmp_path):
    config = checked(migrated(tmp_path, SECTIONS["reasoning_gym"], "rg")[0])
    assert config.data.reasoning_gym.train_size == 640 and config.reasoning_gym.system_prompt == "DeepSeekZero"
    assert OmegaConf.to_container(config.reasoning_gym.datasets.leg_counting) == {
        "weight": 1, "config": {"max_animals": 4}
    }  # fmt: skip
    config = checked(migrated(tmp_path, SECTIONS["curriculum"], "cur")[0])
    curriculum = config.reasoning_gym.curriculum
    assert curriculum.enabled and curriculum.schedule_every == 30 and curriculum.last_k == curriculum.min_samples == 64
    assert curriculum.failure_threshold == 0.2 and list(config.reasoning_gym.datasets) == ["knights_knaves"]
    config = checked(migrated(tmp_path, SECTIONS["reward"], "rew")[0])
    kwargs = config.reward.custom_reward_function.reward_kwargs
    assert {k: v for k, v in kwargs.terms.items() if v} == {"reference_cosine": 0.3, "reference_format": 0.2}
    assert kwargs.reference_terms.preappend_thinking_token is True
    config = checked(migrated(tmp_path, SECTIONS["old_verl"], "verl")[0])
    assert config.actor_rollout_ref.actor.optim.lr_scheduler_type == "cosine"
    assert config.actor_rollout_ref.rollout.load_format == "dummy" and config.trainer.log_val_generations == 4
    assert config.trainer.max_actor_ckpt_to_keep == 1 and config.data.train_files == "reasoning_gym://train"


def test_unknown_and_removed_keys_are_reported_and_left_out(tmp_path):
    path, unmapped = migrated(tmp_path, SECTIONS["unknown"])
    assert [key for key, _ in unmapped] == ["reasoning_gym.mystery", "trainer.no_such_knob", "verbose"]
    config = checked(path)
    assert "no_such_knob" not in config.trainer and "verbose" not in config
    _, unmapped = migrate(SECTIONS["old_verl"])
    assert [key for key, _ in unmapped] == ["data.train_files", "actor_rollout_ref.rollout.use_fire_sampling"]
    # the file says why, above the config
    assert "#   trainer.no_such_knob: neither a key of verl 0.9.1's config" in path.read_text()


def test_a_migrated_config_dry_runs(tmp_path):
    path, _ = migrated(tmp_path, SECTIONS["reward"])
    args = ["train", "--config-path", str(tmp_path), "--config-name", path.stem, "+dry_run=true"]
    overrides = [f"actor_rollout_ref.model.path={tmp_path}", "reasoning_gym.val_size=4", f"hydra.run.dir={tmp_path}"]
    proc = subprocess.run([str(RG_VERL), *args, *overrides], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "--- train[0] reasoning_gym/leg_counting" in proc.stdout
    assert names.system_prompt("default")[:40] in proc.stdout  # no developer_prompt: rg-verl's default prompt


JUNK = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.floats(allow_nan=False) | st.text("ab.$*", max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text("abc_", max_size=4), inner, max_size=3),
    max_leaves=12,
)
SECTION_NAMES = st.sampled_from(
    ["reasoning_gym", "curriculum", "reward", "hydra", "defaults", "data", "trainer", "critic", "reward_model"]
)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(SECTION_NAMES, JUNK, max_size=4))
def test_any_shape_of_old_config_migrates_and_renders_without_raising(old):
    new, unmapped = migrate(old)
    assert new["defaults"] == ["ppo_trainer", "rg_verl_base", "grpo_3b", "_self_"]
    assert all(isinstance(key, str) and isinstance(why, str) for key, why in unmapped)
    assert yaml.safe_load(render(new, unmapped))["hydra"]["searchpath"] == new["hydra"]["searchpath"]


# --- the command ----------------------------------------------------------------------------------------------


def write_old(folder: Path, old: dict) -> Path:
    path = folder / "old.yaml"
    path.write_text(yaml.safe_dump(old))
    return path


def test_the_command_writes_the_config_and_lists_what_it_could_not_carry_over(tmp_path, capsys):
    old = write_old(tmp_path, SECTIONS["unknown"])
    assert main([str(old), "-o", str(tmp_path / "new.yaml")]) == 0
    out = capsys.readouterr().out
    assert "3 keys not carried over" in out and "  trainer.no_such_knob: " in out and "+dry_run=true" in out
    written = yaml.safe_load((tmp_path / "new.yaml").read_text())
    assert written["defaults"] == ["ppo_trainer", "rg_verl_base", "grpo_3b", "_self_"]


def test_the_command_replaces_a_file_only_with_overwrite(tmp_path, capsys):
    old, new = write_old(tmp_path, SECTIONS["reasoning_gym"]), tmp_path / "new.yaml"
    new.write_text("mine\n")
    assert main([str(old), "-o", str(new)]) == 1
    assert "exists; pass --overwrite" in capsys.readouterr().err and new.read_text() == "mine\n"
    assert main([str(old), "-o", str(new), "--overwrite"]) == 0
    assert yaml.safe_load(new.read_text())["reasoning_gym"]["train_size"] == 640


def test_an_interrupted_write_leaves_the_old_file_and_no_other(tmp_path, monkeypatch, capsys):
    old, new = write_old(tmp_path, SECTIONS["reasoning_gym"]), tmp_path / "new.yaml"
    new.write_text("mine\n")

    def fail(*args):
        raise OSError("disk full")

    monkeypatch.setattr("rg_verl.common.atomic.os.replace", fail)
    assert main([str(old), "-o", str(new), "--overwrite"]) == 1
    assert "disk full" in capsys.readouterr().err
    assert new.read_text() == "mine\n" and sorted(p.name for p in tmp_path.iterdir()) == ["new.yaml", "old.yaml"]


def test_the_command_refuses_an_rg_verl_config_and_a_missing_file(tmp_path, capsys):
    assert main([str(CONFIGS_DIR / "smoke" / "cpu.yaml"), "-o", str(tmp_path / "new.yaml")]) == 1
    assert "already an rg-verl config" in capsys.readouterr().err
    assert main([str(tmp_path / "nothing.yaml"), "-o", str(tmp_path / "new.yaml")]) == 1
    assert "nothing.yaml" in capsys.readouterr().err and not (tmp_path / "new.yaml").exists()
    (tmp_path / "broken.yaml").write_text("reasoning_gym: {dataset_size: [1,\n")
    assert main([str(tmp_path / "broken.yaml"), "-o", str(tmp_path / "new.yaml")]) == 1
    assert "broken.yaml" in capsys.readouterr().err and not (tmp_path / "new.yaml").exists()


# --- training refuses a reference config before Ray -----------------------------------------------------------


def test_the_training_config_is_refused_where_it_is_composed_naming_the_command(tmp_path):
    write_old(tmp_path, SECTIONS["curriculum"])
    with pytest.raises(ConfigError, match=f"`{COMMAND} OLD.yaml -o NEW.yaml`"):
        rg_verl.api.compose("old", str(tmp_path))
    write_old(tmp_path, {"reasoning_gym": {"datasets": {"ab": {}}}, "reward": {"secondary_rewards": []}})
    with pytest.raises(ConfigError, match="reward.secondary_rewards"):
        rg_verl.api.train("old", str(tmp_path), ["+dry_run=true"])


def test_train_grpo_names_the_command_for_a_reference_config(tmp_path):
    write_old(tmp_path, SECTIONS["curriculum"])
    cmd = [sys.executable, str(REPO / "train_grpo.py"), "--config-path", str(tmp_path), "--config-name", "old"]
    proc = subprocess.run([*cmd, f"hydra.run.dir={tmp_path}"], capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and COMMAND in proc.stderr, proc.stderr[-2000:]


@pytest.mark.parametrize("entry", ["rg-verl train", "train_grpo.py"])
def test_it_is_named_where_hydra_cannot_compose_the_reference_defaults(entry, tmp_path):
    """The reference's experiment configs list verl's ppo_trainer from a folder of its own checkout."""
    old = {"hydra": {"searchpath": ["file://verl/verl/trainer/config"]}, "defaults": ["ppo_trainer", "_self_"]}
    write_old(tmp_path, {**old, **SECTIONS["reasoning_gym"]})
    door = [str(RG_VERL), "train"] if entry == "rg-verl train" else [sys.executable, str(REPO / "train_grpo.py")]
    proc = subprocess.run(
        [*door, "--config-path", str(tmp_path), "--config-name", "old"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode != 0 and COMMAND in proc.stderr, proc.stderr[-2000:]


def test_no_config_of_ours_looks_like_a_reference_config():
    files = [*CONFIGS_DIR.rglob("*.yaml"), *(REPO / "rg_verl" / "conf").glob("*.yaml")]
    flagged = {str(p.relative_to(REPO)): reference_schema_keys(yaml.safe_load(p.read_text())) for p in files}
    assert files and not {path: keys for path, keys in flagged.items() if keys}
    assert reference_schema_keys(composed(CONFIGS_DIR / "smoke" / "cpu.yaml")) == []


# --- the reference's shipped training configs -----------------------------------------------------------------

ACTOR = "actor_rollout_ref.actor"

# the keys every reference experiment config shares (training/configs/*/*.yaml at 49b0713)
COMMON = {
    "reasoning_gym.dataset_size": 20000,
    "reasoning_gym.developer_prompt": "DeepSeekZero",
    "reward.use_accuracy": True,
    "data.train_batch_size": 32,
    "actor_rollout_ref.model.path": "Qwen/Qwen2.5-3B-Instruct",
    "actor_rollout_ref.actor.use_dynamic_bsz": False,
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": 160,
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": 160,
    "actor_rollout_ref.actor.entropy_coeff": 0.001,
    "actor_rollout_ref.actor.use_kl_loss": True,
    "actor_rollout_ref.actor.kl_loss_coef": 0.001,
    "actor_rollout_ref.actor.kl_loss_type": "low_var_kl",
    "actor_rollout_ref.actor.optim.lr": 1e-6,
    "actor_rollout_ref.rollout.name": "vllm",
    "actor_rollout_ref.rollout.n": 8,
    "actor_rollout_ref.rollout.temperature": 1.0,
    "actor_rollout_ref.rollout.tensor_model_parallel_size": 4,
    "algorithm.adv_estimator": "grpo",
    "trainer.total_epochs": 1,
    "trainer.n_gpus_per_node": 4,
    "trainer.total_training_steps": 500,
}
# the three shapes of their lengths and micro-batches
LONG = {
    "data.max_prompt_length": 4096,
    "data.max_response_length": 2048,
    "actor_rollout_ref.actor.ppo_mini_batch_size": 16,
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 8,
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": 49152,
}
SHORT = {**LONG, "data.max_prompt_length": 512, "data.max_response_length": 1024}
SHORT |= {f"{ACTOR}.ppo_micro_batch_size_per_gpu": 4, f"{ACTOR}.ppo_max_token_len_per_gpu": 12288}
KNIGHTS = {**LONG, f"{ACTOR}.ppo_mini_batch_size": 8, "trainer.total_training_steps": 300}
KNIGHTS |= {f"{ACTOR}.ppo_micro_batch_size_per_gpu": 2, f"{ACTOR}.ppo_max_token_len_per_gpu": 34816}
# their secondary rewards
FORMAT = {"name": "format", "scaling_factor": 0.2, "kwargs": {"preappend_thinking_token": False}}
COSINE_FORMAT = {"reward.secondary_rewards": [{"name": "cosine", "scaling_factor": 0.3}, FORMAT]}
FORMAT_LENGTH = {"reward.secondary_rewards": [FORMAT, {"name": "length", "scaling_factor": 0.2}]}
FORMAT_ONLY = {"reward.secondary_rewards": [FORMAT]}


def mix(*names: str, weights=None, **configs) -> dict:
    """``reasoning_gym.datasets``: ``names`` with ``weights`` (default 1 each), and the ``configs`` given."""
    entries = {}
    for name, weight in zip(names, weights or [1] * len(names), strict=True):
        entries[name] = {"weight": weight, **({"config": configs[name]} if name in configs else {})}
    return {"reasoning_gym.datasets": entries}


def curriculum(name: str, levels: dict, last_k: int, failure: float) -> dict:
    return {
        "reasoning_gym.datasets": None,
        "curriculum": {
            "enabled": True,
            "schedule": {"automatic": False, "update_steps": 30},
            "last_k": last_k,
            "success_threshold": 0.7,
            "failure_threshold": failure,
            "curricula": {name: {"attribute_levels": levels}},
        },
    }


THIRDS = [0.33, 0.34, 0.33]
# reference config (training/configs/<name>.yaml) -> its keys (a reduced config, verl's old layout included)
REFERENCE = {
    name: expand({**COMMON, **keys})
    for name, keys in {
        "curriculum/knights_knaves_curriculum": {
            **KNIGHTS, **FORMAT_ONLY,
            **curriculum("knights_knaves", {"n_people": 0, "depth_constraint": 0, "width_constraint": 0}, 2560, 0.3),
        },
        "curriculum/knights_knaves_noncurriculum": {
            **KNIGHTS, **FORMAT_ONLY,
            **mix("knights_knaves", knights_knaves={"n_people": 5, "depth_constraint": 3, "width_constraint": 3}),
        },
        "curriculum/spell_backward": {
            **SHORT, **COSINE_FORMAT, "trainer.total_training_steps": 400,
            **curriculum("spell_backward", {"word_len": 0}, 20, 0.1),
        },
        "external_benchmarks/maths_llama_3b": {
            **SHORT, **COSINE_FORMAT, "reasoning_gym.dataset_size": 40000, "trainer.total_training_steps": 2000,
            "actor_rollout_ref.model.path": "meta-llama/Llama-3.2-3B-Instruct",
            **mix("complex_arithmetic", "intermediate_integration", "polynomial_equations", "polynomial_multiplication",
                  "simple_geometry", "bitwise_arithmetic", "chain_sum", "decimal_arithmetic", "decimal_chain_sum"),
        },
        "inter_generalisation/algebra_qwen_3b": {
            **LONG, **FORMAT_LENGTH,
            **mix("complex_arithmetic", "intermediate_integration", "polynomial_equations", "polynomial_multiplication",
                  "simple_equations", "simple_integration"),
        },
        "inter_generalisation/algorithmic_qwen_3b": {
            **LONG, **FORMAT_LENGTH,
            **mix("ab", "base_conversion", "binary_alternation", "binary_matrix", "caesar_cipher", "cryptarithm",
                  "isomorphic_strings", "jugs", "rotate_matrix", "string_manipulation",
                  binary_alternation={"p_solvable": 0.9}, binary_matrix={"min_n": 2, "max_n": 6},
                  caesar_cipher={"max_words": 10}, isomorphic_strings={"max_string_length": 8},
                  jugs={"difficulty": 6}, rotate_matrix={"min_n": 2, "max_n": 6},
                  string_manipulation={"max_string_length": 15, "max_num_rules": 6}),
        },
        "inter_generalisation/games_qwen_3b": {
            **LONG, **FORMAT_ONLY,
            **mix("futoshiki", "knight_swap", "mahjong_puzzle", "maze", "mini_sudoku", "n_queens", "rush_hour",
                  "sokoban", "sudoku", "tsumego"),
        },
        "inter_generalisation/logic_qwen_3b": {
            **LONG, **FORMAT_LENGTH,
            **mix("aiw", "circuit_logic", "knights_knaves", "propositional_logic", "self_reference", "syllogism",
                  "zebra_puzzles"),
        },
        "intra_generalisation/algebra_qwen_3b": {
            **SHORT, **COSINE_FORMAT,
            **mix("simple_equations", "polynomial_multiplication", weights=[0.5, 0.5],
                  simple_equations={"min_terms": 2, "max_terms": 4, "min_value": 1, "max_value": 100},
                  polynomial_multiplication={"min_terms": 2, "max_terms": 4, "min_value": 1, "max_value": 100,
                                             "min_degree": 0, "max_degree": 3, "min_polynomials": 2,
                                             "max_polynomials": 3}),
        },
        "intra_generalisation/algorithmic_qwen_3b": {
            **SHORT, **COSINE_FORMAT,
            **mix("spell_backward", "letter_jumble", "word_sorting", weights=THIRDS,
                  spell_backward={"min_word_len": 3, "max_word_len": 10},
                  letter_jumble={"min_word_len": 1, "max_word_len": 50, "min_words": 3, "max_words": 40},
                  word_sorting={"min_words": 3, "max_words": 10, "min_word_length": 3, "max_word_length": 12}),
        },
        "intra_generalisation/arithmetic_qwen_3b": {
            **SHORT, **COSINE_FORMAT,
            **mix("fraction_simplification", "gcd", "lcm", weights=THIRDS,
                  fraction_simplification={"min_value": 1, "max_value": 1000, "min_factor": 1, "max_factor": 100},
                  gcd={"min_numbers": 2, "max_numbers": 2, "min_value": 1, "max_value": 1000},
                  lcm={"min_numbers": 2, "max_numbers": 2, "min_value": 1, "max_value": 100}),
        },
        "intra_generalisation/cognition_qwen_3b": {
            **SHORT, **COSINE_FORMAT,
            **mix("rubiks_cube", "figlet_font", "rectangle_count", weights=THIRDS,
                  rubiks_cube={"min_scramble_steps": 3, "max_scramble_steps": 10},
                  figlet_font={"min_word_len": 3, "max_word_len": 7},
                  rectangle_count={"max_rectangles": 10, "width": 80, "height": 80}),
        },
        "intra_generalisation/games_qwen_3b": {
            **SHORT, **COSINE_FORMAT,
            **mix("mini_sudoku", "futoshiki", "sokoban", weights=THIRDS,
                  mini_sudoku={"min_empty": 8, "max_empty": 12},
                  futoshiki={"min_board_size": 4, "max_board_size": 9, "min_difficulty": 0, "max_difficulty": 3},
                  sokoban={"min_w": 6, "min_h": 6, "max_w": 10, "max_h": 10, "min_boxes": 4, "max_boxes": 10,
                           "max_depth": 80}),
        },
        "intra_generalisation/graphs_qwen_3b": {
            **SHORT, **COSINE_FORMAT,
            **mix("shortest_path", "largest_island", "quantum_lock", weights=THIRDS,
                  shortest_path={"min_rows": 5, "max_rows": 8, "min_cols": 5, "max_cols": 8, "p_blocked": 0.4},
                  largest_island={"min_rows": 5, "max_rows": 10, "min_cols": 5, "max_cols": 10,
                                  "min_num_islands": 0, "max_num_islands": 5, "min_island_size": 0,
                                  "max_island_size": 10},
                  quantum_lock={"difficulty": 10}),
        },
    }.items()
}  # fmt: skip
# reference config -> ours (configs/<path>.yaml)
OURS = {name: name for name in REFERENCE} | {
    "curriculum/knights_knaves_noncurriculum": "curriculum/knights_knaves_no_curriculum",
    "curriculum/spell_backward": "curriculum/spell_backward_curriculum",
    "external_benchmarks/maths_llama_3b": "external_benchmarks/rg_math_llama_3b",
}


@pytest.mark.parametrize("name", REFERENCE)
def test_a_reference_experiment_migrates_and_passes_our_checks_and_verls(tmp_path, name):
    path, unmapped = migrated(tmp_path, REFERENCE[name], name.replace("/", "__"))
    config = checked(path)
    assert config.reasoning_gym.datasets and config.actor_rollout_ref.rollout.n == 8
    # the note on the validation size; a threshold curriculum's update_steps, which it never read; the log-prob
    # micro-batches of 160, which do not split a rank's 64 samples (verl 0.9.1's engine workers stop on that)
    micro = {f"actor_rollout_ref.{role}.log_prob_micro_batch_size_per_gpu" for role in ("rollout", "ref")}
    assert {key for key, _ in unmapped} <= {"reasoning_gym.dataset_size", "curriculum.schedule.update_steps", *micro}
    for key in micro:
        assert OmegaConf.select(config, key) == 64
        assert dict(unmapped)[key] == (
            "160 does not split each rank's share into whole micro-batches, which verl 0.9.1's engine workers stop "
            "on; set to 64"
        )


def reference_file(name: str) -> dict:
    """training/configs/<name>.yaml of the reference repository that RG_VERL_REFERENCE_REPO names."""
    repo = os.environ.get("RG_VERL_REFERENCE_REPO")
    if not repo:
        pytest.skip("set RG_VERL_REFERENCE_REPO to a reasoning-gym git repository to read the reference's files")
    show = ["git", "-C", repo, "show", f"{REFERENCE_COMMIT}:training/configs/{name}.yaml"]
    text = subprocess.run(show, capture_output=True, text=True, check=True).stdout
    return OmegaConf.to_container(OmegaConf.create(text), resolve=False)


@pytest.mark.parametrize("name", REFERENCE)
def test_the_reference_data_is_the_reference_files_and_the_whole_files_migrate(tmp_path, name):
    old = reference_file(name)
    wrong = {k: (v, get(old, k)) for k, v in flatten(REFERENCE[name]).items() if not same(get(old, k), v, k)}
    assert not wrong, f"REFERENCE[{name!r}] differs from the file (ours, the file's): {wrong}"
    path, unmapped = migrated(tmp_path, old, name.replace("/", "__"))
    checked(path)
    assert "data.val_batch_size" in dict(unmapped) and "critic" in dict(unmapped)


def selected(config, key: str):
    value = OmegaConf.select(config, key)
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


def _weights(config) -> dict:
    mix = selected(config, "reasoning_gym.datasets")
    total = sum(spec["weight"] for spec in mix.values())
    return {name: round(spec["weight"] / total, 6) for name, spec in mix.items()}


def _curriculum(config):
    settings = selected(config, "reasoning_gym.curriculum")
    return {key: value for key, value in settings.items()} if settings["enabled"] else "off"


KWARGS = "reward.custom_reward_function.reward_kwargs"
# what "the same experiment" means: field -> what it reads from a composed config
FIELDS = {
    "model": lambda c: selected(c, "actor_rollout_ref.model.path"),
    "datasets": lambda c: sorted(selected(c, "reasoning_gym.datasets")),
    "weights": _weights,
    "params": lambda c: {n: s.get("config", {}) for n, s in selected(c, "reasoning_gym.datasets").items()},
    "prompt": lambda c: names.system_prompt(selected(c, "reasoning_gym.system_prompt")),
    "reward terms": lambda c: {n: w for n, w in selected(c, f"{KWARGS}.terms").items() if w},
    "reward term options": lambda c: selected(c, f"{KWARGS}.reference_terms"),
    "lengths": lambda c: (selected(c, "data.max_prompt_length"), selected(c, "data.max_response_length")),
    "batch sizes": lambda c: (selected(c, "data.train_batch_size"), selected(c, f"{ACTOR}.ppo_mini_batch_size")),
    "lr": lambda c: selected(c, f"{ACTOR}.optim.lr"),
    "KL": lambda c: [selected(c, f"{ACTOR}.{k}") for k in ("use_kl_loss", "kl_loss_coef", "kl_loss_type")]
    + [selected(c, "algorithm.use_kl_in_reward")],
    "entropy": lambda c: selected(c, f"{ACTOR}.entropy_coeff"),
    "rollout n, temperature": lambda c: [selected(c, f"actor_rollout_ref.rollout.{k}") for k in ("n", "temperature")],
    "steps": lambda c: selected(c, "trainer.total_training_steps"),
    "curriculum": _curriculum,
}
# fields a shipped config may differ in by design: ours -> {field: why}
BY_DESIGN: dict[str, dict[str, str]] = {
    "intra_generalisation/cognition_qwen_3b": {
        "lengths": "a 4096-token prompt budget: rectangle_count and figlet_font prompts do not fit in 512 "
        "(docs/experiments.md)",
    },
}
# the shipped configs match the reference's experiments (modulo BY_DESIGN): the comparison is a plain test
SHIPPED_CONFIGS_MATCH_THE_REFERENCE = True


def mismatches(reference, ours, allowed: dict) -> dict:
    """field -> (the migrated reference's value, ours) where they differ."""
    pairs = {field: (read(reference), read(ours)) for field, read in FIELDS.items() if field not in allowed}
    return {field: pair for field, pair in pairs.items() if not same(*pair)}


@pytest.mark.xfail(
    not SHIPPED_CONFIGS_MATCH_THE_REFERENCE, strict=False,
    reason="the shipped configs differ from the reference's experiments in places; the failure lists the fields",
)  # fmt: skip
@pytest.mark.parametrize("name", REFERENCE)
def test_our_shipped_config_runs_the_reference_experiment(tmp_path, name):
    path, _ = migrated(tmp_path, REFERENCE[name], name.replace("/", "__"))
    ours = OURS[name]
    differing = mismatches(composed(path), composed(CONFIGS_DIR / f"{ours}.yaml"), BY_DESIGN.get(ours, {}))
    assert not differing, f"configs/{ours}.yaml differs from the reference's {name} (reference, ours): {differing}"
