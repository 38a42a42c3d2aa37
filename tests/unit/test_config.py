"""rg_verl.config: our sections are checked before Ray, and every error names field, value and fix.

Also the module graph around it: each module imports first without a cycle, and no rg_verl import hides
inside a function unless it is deliberately lazy for a cost.
"""

import ast
import dataclasses
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from rg_verl.common.names import TERM_NAMES
from rg_verl.common.models import check_model_path
from rg_verl.common.schema import ConfigError
from rg_verl.config import tiny_model_config, validate
from rg_verl.cpu.tiny_model import TinyModelConfig, TinyModelOptions
from rg_verl.cpu.warm_start import WARM_START_DEFAULTS, WarmStartOptions
from rg_verl.data.config import ReasoningGymConfig
from rg_verl.reward.config import RewardConfig
from rg_verl.reward.terms import TERMS
from tests.helpers import REPO


def rg(**overrides):
    section = {"datasets": {"chain_sum": {"weight": 1.0}}, **overrides}
    return ReasoningGymConfig.from_section(section)


@pytest.mark.parametrize(
    "section, message",
    [
        ({"datasets": {"chain_sun": {}}}, r"reasoning_gym\.datasets\.chain_sun: unknown .* Did you mean 'chain_sum'"),
        ({"datasets": {"chain_sum": {"weight": -1}}}, r"chain_sum\.weight: -1 is below 0"),
        ({"datasets": {"chain_sum": {"weight": 0}}}, r"every weight is 0; give at least one dataset a positive"),
        ({"datasets": {"chain_sum": {"weight": "heavy"}}}, r"weight: 'heavy' is not a finite number"),
        ({"datasets": {"chain_sum": {"config": {"min_terms": 0}}}}, r"chain_sum\.config: reasoning-gym rejects"),
        ({"datasets": {"chain_sum": {"config": {"no_such_knob": 1}}}}, r"chain_sum\.config: reasoning-gym rejects"),
        ({"datasets": {"chain_sum": {"config": {"seed": 3}}}}, r"config\.seed: set by rg-verl"),
        ({"datasets": {"chain_sum": {"wieght": 1}}}, r"chain_sum\.wieght: unknown key \(did you mean 'weight'\?\)"),
        ({"datasets": {}}, r"reasoning_gym\.datasets: needs at least one dataset"),
        ({"datasets": {"chain_sum": {}}, "train_sise": 5}, r"reasoning_gym\.train_sise: unknown key .*'train_size'"),
        ({"datasets": {"chain_sum": {}}, "seed": -1}, r"reasoning_gym\.seed: -1 is not an integer in"),
        ({"datasets": {"chain_sum": {}}, "val_size": 0}, r"reasoning_gym\.val_size: 0 is not an integer in"),
        ({"datasets": {"chain_sum": {}}, "val_datasets": {"leg_countin": {}}}, r"val_datasets\.leg_countin: unknown"),
    ],
)
def test_reasoning_gym_section_errors(section, message):
    with pytest.raises(ConfigError, match=message):
        ReasoningGymConfig.from_section(section)


def test_reasoning_gym_section_defaults_and_mixes():
    config = rg(val_datasets={"leg_counting": {"weight": 2}})
    assert config.seed == 42 and config.train_size == 10000 and config.system_prompt == "default"
    assert list(config.mix("train")) == ["chain_sum"]
    assert list(config.mix("val")) == list(config.mix("eval")) == ["leg_counting"]
    assert config.mix("val")["leg_counting"].weight == 2.0
    assert list(rg().mix("val")) == ["chain_sum"]  # no val_datasets: validate on the training mix


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"mode": "fuzzy"}, r"reward_kwargs\.mode: 'fuzzy' is not a mode; set one of strict, lenient"),
        ({"terms": {"brevity": 1}}, r"terms\.brevity: unknown reward term; valid terms: cosine, format, length"),
        ({"terms": {"format": "lots"}}, r"terms\.format: 'lots' is not a finite number"),
        ({"terms": {"length": 0.1}}, r"set tokenizer_path and max_response_length"),
        ({"strict": True}, r"reward_kwargs\.strict: unknown key; valid keys: mode, terms"),
    ],
)
def test_reward_section_errors(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        RewardConfig.from_section(kwargs)


def test_model_path_must_be_a_directory_or_hub_id(tmp_path):
    check_model_path("m", str(tmp_path))
    check_model_path("m", "Qwen/Qwen2.5-3B-Instruct")
    for bad in [str(tmp_path / "missing"), "not a path", "", None, "a/b/c"]:
        with pytest.raises(ConfigError, match=r"m: .* (neither a local model directory nor a hub id|not a model path)"):
            check_model_path("m", bad)


def test_a_mistyped_hub_id_stops_a_dry_run_in_seconds_with_one_line(tmp_path):
    """Offline, with an empty Hugging Face cache: train_grpo.py names the id before Ray starts (it failed 89 s in)."""
    typo = "Qwen/Qwen2.5-3B-Instrct"
    env = {name: value for name, value in os.environ.items() if name != "HF_HUB_CACHE"}
    env.update(HF_HOME=str(tmp_path / "hf"), HF_HUB_OFFLINE="1")
    proc = subprocess.run(
        [sys.executable, str(REPO / "train_grpo.py"), "+dry_run=true", f"actor_rollout_ref.model.path={typo}"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [  # this line alone: Ray, had it started, would have said so on stderr
        f"Invalid config: actor_rollout_ref.model.path: {typo!r} is no local folder, this machine is offline "
        f"(HF_HUB_OFFLINE), and the Hugging Face cache at {tmp_path / 'hf' / 'hub'} does not hold it; fix the id, or "
        f"download it with `hf download {typo}` on a machine that is online and set HF_HOME (or HF_HUB_CACHE) to the "
        "cache that holds it, or give a local folder"
    ]


def test_validate_checks_the_composed_config(tmp_path):
    config = OmegaConf.create(
        {
            "reasoning_gym": {"datasets": {"chain_sum": {}}},
            "reward": {"custom_reward_function": {"path": "pkg://rg_verl.reward", "reward_kwargs": {"mode": "x"}}},
            "actor_rollout_ref": {"model": {"path": str(tmp_path)}},
        }
    )
    with pytest.raises(ConfigError, match="mode"):
        validate(config)
    config.reward.custom_reward_function.reward_kwargs.mode = "strict"
    assert list(validate(config).datasets) == ["chain_sum"]
    config.actor_rollout_ref.model.path = str(tmp_path / "nope")
    with pytest.raises(ConfigError, match="actor_rollout_ref.model.path"):
        validate(config)


def test_curriculum_needs_an_in_process_dataloader(tmp_path):
    config = OmegaConf.create(
        {
            "reasoning_gym": {
                "datasets": {"chain_sum": {}},
                "curriculum": {"enabled": True, "levels": {"chain_sum": {"*": 1}}},
            },
            "data": {"dataloader_num_workers": 8},
            "actor_rollout_ref": {"model": {"path": str(tmp_path)}},
        }
    )
    with pytest.raises(ConfigError, match="data.dataloader_num_workers: 8 .* set data.dataloader_num_workers=0"):
        validate(config)
    config.data.dataloader_num_workers = 0
    assert validate(config).curriculum.levels == {"chain_sum": {"*": 1}}


def test_reward_config_defaults_and_parsed_values():
    defaults = RewardConfig.from_section(None)
    assert (defaults.mode, defaults.terms, defaults.tokenizer_path) == ("lenient", {}, None)
    assert defaults.max_response_length is None and defaults.math_datasets == []
    kwargs = {"mode": "strict", "terms": {"format": 1, "length": 0.5}, "tokenizer_path": "o/t"}
    kwargs["max_response_length"] = 64
    parsed = RewardConfig.from_section(kwargs)
    assert parsed.mode == "strict" and parsed.terms == {"format": 1.0, "length": 0.5}
    assert isinstance(parsed.terms["format"], float) and parsed.max_response_length == 64
    with pytest.raises(ConfigError, match=r"^reward\.custom_reward_function\.reward_kwargs\.max_response_length: 0 is"):
        RewardConfig.from_section({"max_response_length": 0})
    with pytest.raises(ConfigError, match=r"^r\.math_datasets\[0\]: unknown reasoning-gym dataset 'chain_sun'"):
        RewardConfig.from_section({"math_datasets": ["chain_sun"]}, where="r")
    for blank in ("", None, []):  # `math_datasets=` on the command line gives Hydra ''
        assert RewardConfig.from_section({"math_datasets": blank}).math_datasets == []
    assert RewardConfig.from_section({"terms": {"length": 0.0}}).terms == {"length": 0.0}  # off: no tokenizer needed


@pytest.mark.parametrize(
    "section, message",
    [
        ({"curriculum": {"enabled": "yes"}}, r"reasoning_gym\.curriculum\.enabled: 'yes' is not true or false"),
        ({"curriculum": {"success_threshold": 1.5}}, r"curriculum\.success_threshold: 1\.5 is above 1\.0"),
        ({"adaptive_weights": {"floor": 1.5}}, r"adaptive_weights\.floor: 1\.5 is above 1\.0; set a value <= 1\.0"),
        ({"adaptive_weights": {"window": 0}}, r"adaptive_weights\.window: 0 is not an integer in \[1, 1000000\]"),
        ({"adaptive_weights": {"flor": 0.5}}, r"adaptive_weights\.flor: unknown key \(did you mean 'floor'\?\)"),
        ({"system_prompt": 3}, r"reasoning_gym\.system_prompt: 3 is not text"),
        ({"seed": 10**9}, r"reasoning_gym\.seed: 1000000000 is not an integer in \[0, 999999999\]"),
    ],
)
def test_declared_limits_name_the_field(section, message):
    with pytest.raises(ConfigError, match=message):
        rg(**section)


def test_a_missing_section_says_what_to_add():
    with pytest.raises(ConfigError, match=r"^reasoning_gym: missing; add a reasoning_gym section"):
        ReasoningGymConfig.from_section(None)


def composed_minimal(tmp_path, **sections) -> OmegaConf:
    return OmegaConf.create(
        {
            "reasoning_gym": {"datasets": {"chain_sum": {}}},
            "actor_rollout_ref": {"model": {"path": str(tmp_path)}},
            **sections,
        }
    )


def test_the_v1_trainer_is_required_before_anything_is_built(tmp_path):
    # a bad model path would also fail: the trainer is checked first, so nothing else is looked at
    config = composed_minimal(tmp_path, trainer={"use_v1": False})
    config.actor_rollout_ref.model.path = str(tmp_path / "absent")
    with pytest.raises(ConfigError, match=r"^trainer\.use_v1: False; rg-verl runs on verl's V1 trainer"):
        validate(config)
    config.trainer.use_v1 = True
    config.actor_rollout_ref.model.path = str(tmp_path)
    assert list(validate(config).datasets) == ["chain_sum"]


def test_module_paths_of_our_package_must_exist_and_others_are_left_to_verl(tmp_path):
    config = composed_minimal(tmp_path, reward={"custom_reward_function": {"path": "pkg://rg_verl.reward"}})
    validate(config)  # the reward package exports compute_score
    config.reward.custom_reward_function.path = "pkg://rg_verl.rewards"
    with pytest.raises(ConfigError, match=r"reward\.custom_reward_function\.path: 'pkg://rg_verl\.rewards' names no"):
        validate(config)
    config.reward.custom_reward_function.path = "pkg://my_project.reward"  # someone else's module
    validate(config)


def test_a_file_path_to_a_module_that_became_a_package_names_the_package(tmp_path):
    """``.../rg_verl/reward.py`` was a file; rg_verl.reward is now a package, so verl would find no file."""
    config = composed_minimal(tmp_path, reward={"custom_reward_function": {"path": "/opt/rg-verl/rg_verl/reward.py"}})
    with pytest.raises(ConfigError, match=r"does not exist; set reward\.custom_reward_function\.path=pkg://rg_verl\.reward$"):
        validate(config)
    existing = importlib.util.find_spec("rg_verl.data.dataset").origin
    config.reward.custom_reward_function.path = "pkg://rg_verl.reward"
    OmegaConf.update(config, "data.custom_cls.path", existing)  # a real file of ours is fine
    validate(config)


def test_a_blank_mapping_or_list_means_its_empty_default():
    """``config:`` with nothing under it is YAML's null: it means {} (and [] for lists), as before."""
    settings = ReasoningGymConfig.from_section(
        {"datasets": {"chain_sum": {"config": None}}, "val_datasets": None, "curriculum": {"levels": None}}
    )
    assert settings.datasets["chain_sum"].config == {} and settings.val_datasets == {}
    assert settings.curriculum.levels == {}
    reward = RewardConfig.from_section({"terms": None, "math_datasets": None})
    assert reward.terms == {} and reward.math_datasets == []
    with pytest.raises(ConfigError, match=r"^reasoning_gym\.datasets: needs at least one dataset"):
        ReasoningGymConfig.from_section({"datasets": None})


def test_the_term_names_a_config_may_use_are_the_registered_terms():
    assert TERM_NAMES == tuple(TERMS)


# ---- the tiny_model section


def test_the_tiny_model_section_defaults_come_from_its_dataclasses(tmp_path):
    tiny = tiny_model_config(composed_minimal(tmp_path))  # no tiny_model section: every default
    assert tiny == TinyModelConfig() and not tiny.build_if_missing and tiny.warm_start is None
    assert tiny.build_options() == {**dataclasses.asdict(TinyModelOptions()), "warm_start": None}
    assert WARM_START_DEFAULTS == dataclasses.asdict(WarmStartOptions())
    assert [f.name for f in dataclasses.fields(TinyModelConfig)][-2:] == ["build_if_missing", "warm_start"]


@pytest.mark.parametrize(
    "section, message",
    [
        ({"hidden_sise": 8}, r"^tiny_model\.hidden_sise: unknown key \(did you mean 'hidden_size'\?\); valid keys: "),
        ({"build_if_missing": "yes"}, r"^tiny_model\.build_if_missing: 'yes' is not true or false"),
        ({"num_layers": 0}, r"^tiny_model\.num_layers: 0 is not an integer in \[1, "),
        ({"vocab_size": 100}, r"^tiny_model\.vocab_size: 100 is not an integer in \[263, "),
        ({"num_heads": 3}, r"^tiny_model\.hidden_size: 64 is not num_heads=3 times an even head size"),
        ({"hidden_size": 36}, r"^tiny_model\.hidden_size: 36 is not num_heads=4 times an even head size"),
        ({"num_kv_heads": 3}, r"^tiny_model\.num_kv_heads: 3 does not divide num_heads=4"),
        ({"warm_start": {"stpes": 3}}, r"^tiny_model\.warm_start\.stpes: unknown key \(did you mean 'steps'\?\)"),
        ({"warm_start": {"format_rate": 1.5}}, r"^tiny_model\.warm_start\.format_rate: 1\.5 is above 1\.0"),
        ({"warm_start": {"steps": 0}}, r"^tiny_model\.warm_start\.steps: 0 is not an integer in \[1, "),
        ({"warm_start": {"datasets": ["chain_sun"]}}, r"^tiny_model\.warm_start\.datasets\.chain_sun: unknown .*sum'"),
        (
            {"warm_start": {"datasets": {"chain_sum": {"min_terms": 0}}}},
            r"^tiny_model\.warm_start\.datasets\.chain_sum\.config: reasoning-gym rejects",
        ),
    ],
)
def test_validate_checks_the_tiny_model_section_before_anything_is_built(tmp_path, section, message):
    model = tmp_path / "model"
    config = composed_minimal(tmp_path, tiny_model={"build_if_missing": True, **section})
    config.actor_rollout_ref.model.path = str(model)
    with pytest.raises(ConfigError, match=message):
        validate(config)
    assert not model.exists()


def test_a_model_to_build_needs_no_directory_yet(tmp_path):
    config = composed_minimal(tmp_path, tiny_model={"build_if_missing": True, "hidden_size": 32})
    config.actor_rollout_ref.model.path = str(tmp_path / "model")  # absent: it is built later
    validate(config)
    assert tiny_model_config(config).hidden_size == 32 and not (tmp_path / "model").exists()
    config.tiny_model.build_if_missing = False
    with pytest.raises(ConfigError, match="actor_rollout_ref.model.path"):
        validate(config)


def test_a_tiny_model_to_build_is_checked_against_the_positions_it_will_get(tmp_path):
    config = composed_minimal(tmp_path, tiny_model={"build_if_missing": True, "max_position_embeddings": 256},
                              data={"max_prompt_length": 240, "max_response_length": 32})  # fmt: skip
    model = tmp_path / "model"
    config.actor_rollout_ref.model.path = str(model)
    with pytest.raises(ConfigError) as error:
        validate(config)
    assert str(error.value) == (
        "data.max_prompt_length + data.max_response_length = 240 + 32 = 272 tokens, more than the 256 positions of "
        f"the model at actor_rollout_ref.model.path={model} (tiny_model.max_position_embeddings 256, the tiny model "
        "rg-verl builds there); lower data.max_response_length or data.max_prompt_length, or train a model with a "
        "longer context"
    )
    assert not model.exists()
    config.data.max_prompt_length = 224
    validate(config)


def test_a_model_on_disk_is_checked_against_its_config_not_the_tiny_model_section(tmp_path):
    """A folder that holds a model is read, whatever the tiny_model section says; the smoke config's model too."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "qwen2", "max_position_embeddings": 128}')
    config = composed_minimal(tmp_path, tiny_model={"build_if_missing": True},
                              data={"max_prompt_length": 120, "max_response_length": 16})  # fmt: skip
    config.actor_rollout_ref.model.path = str(model)
    with pytest.raises(ConfigError, match=rf"more than the 128 positions of .* \(max_position_embeddings 128 in "
                                          rf"{re.escape(str(model / 'config.json'))}\)"):  # fmt: skip
        validate(config)
    config.tiny_model.build_if_missing = False
    with pytest.raises(ConfigError, match="136 tokens, more than the 128 positions"):
        validate(config)


def test_a_cached_hub_models_context_comes_from_its_cached_config():
    """tests/hub_cache.py holds Qwen2.5-Math-1.5B-Instruct's config: 4096 positions."""
    config = composed_minimal(Path("."), data={"max_prompt_length": 4000, "max_response_length": 200})
    config.actor_rollout_ref.model.path = "Qwen/Qwen2.5-Math-1.5B-Instruct"
    with pytest.raises(ConfigError) as error:
        validate(config)
    assert re.match(r"data.max_prompt_length \+ data.max_response_length = 4000 \+ 200 = 4200 tokens, more than the "
                    r"4096 positions of the model at actor_rollout_ref.model.path=Qwen/Qwen2.5-Math-1.5B-Instruct "
                    r"\(max_position_embeddings 4096 in .*/models--Qwen--Qwen2.5-Math-1.5B-Instruct/snapshots/",
                    str(error.value))  # fmt: skip


def test_a_warm_start_draws_its_prompts_like_the_run_unless_it_says_otherwise(tmp_path, math_data):
    gsm8k = {"format": "gsm8k", "train": str(math_data / "gsm8k/train.parquet")}
    config = composed_minimal(tmp_path, tiny_model={"warm_start": {"steps": 3}})
    config.reasoning_gym = {
        "datasets": {"chain_sum": {"config": {"min_terms": 2}}, "leg_counting": None, "gsm8k": {"source": gsm8k}},
        "system_prompt": "Think, then answer.",
    }
    warm = tiny_model_config(config).warm_start
    assert warm.steps == 3 and warm.system_prompt == "Think, then answer."
    assert warm.datasets == {"chain_sum": {"min_terms": 2}, "leg_counting": {}}  # a file has no generator
    config.tiny_model.warm_start = {"datasets": ["spell_backward"], "system_prompt": "default"}
    warm = tiny_model_config(config).warm_start
    assert warm.datasets == {"spell_backward": {}} and warm.system_prompt == "default"
    config.reasoning_gym.datasets = {"gsm8k": {"source": gsm8k}}
    config.tiny_model.warm_start = {}
    with pytest.raises(ConfigError, match=r"^tiny_model\.warm_start\.datasets: no reasoning-gym dataset to draw"):
        tiny_model_config(config)
    config.tiny_model.warm_start = None  # a blank warm_start: no warm start
    assert tiny_model_config(config).warm_start is None


# ---- the module graph: no cycle, so each module imports first; no import hidden in a function to dodge one


FIRST_IMPORTS = ["rg_verl.config", "rg_verl.reward", "rg_verl.data.dataset", "rg_verl.data.files"]
FIRST_IMPORTS += ["rg_verl.evaluation.config"]


@pytest.mark.parametrize("module", FIRST_IMPORTS)
def test_each_module_imports_first_in_a_fresh_interpreter(module):
    proc = subprocess.run([sys.executable, "-c", f"import {module}"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]


PACKAGE = REPO / "rg_verl"
# the rg_verl imports made inside a function, each deliberately lazy for a cost; a comment at the import says why
LAZY_IMPORTS = {
    # the CPU platform imports verl and torch and registers itself with verl: a GPU run must not import it
    ("rg_verl/grpo/launch.py", "prepare", "rg_verl.cpu.platform"),
    ("rg_verl/oreo/launch.py", "prepare_process", "rg_verl.cpu.platform"),
    ("rg_verl/oreo/rft.py", "run", "rg_verl.cpu.platform"),
    # the OREO trainer imports verl's engines, which pick the platform when imported
    ("rg_verl/oreo/launch.py", "main_task", "rg_verl.oreo.trainer"),
    # the dataset imports torch, which neither rg-verl train --help nor a rejected config needs
    ("rg_verl/grpo/launch.py", "dry_run", "rg_verl.data.dataset"),
    # the same for the export (rg-verl export --help, a rejected config) and the space check before Ray starts
    ("rg_verl/data/export.py", "export_split", "rg_verl.data.dataset"),
    ("rg_verl/data/spaces.py", "space_warnings", "rg_verl.data.dataset"),
    ("rg_verl/oreo/collect.py", "_datasets", "rg_verl.data.dataset"),
    # the trainer module loads in every Ray process of a run (VERL_USE_EXTERNAL_MODULES); only the task runner's
    # steps use the dataset, and reasoning-gym costs about a CPU-second to import
    ("rg_verl/grpo/trainer.py", "step", "rg_verl.data.dataset"),
    # verl's replica registry takes a loader: the replica (Ray actor, transformers server) loads when chosen
    ("rg_verl/hf_rollout/__init__.py", "_load_replica", "rg_verl.hf_rollout.replica"),
    # the Python API: `import rg_verl` imports it, and must load no library (tests/unit/test_api.py)
    ("rg_verl/api.py", "compose", "rg_verl.common.compose"),
    ("rg_verl/api.py", "compose", "rg_verl.grpo.cli"),
    ("rg_verl/api.py", "train", "rg_verl.grpo.launch"),
    ("rg_verl/api.py", "evaluate", "rg_verl.evaluation.config"),
    ("rg_verl/api.py", "evaluate", "rg_verl.evaluation.runner"),
    ("rg_verl/api.py", "convert", "rg_verl.checkpoint.convert"),
}


def _module_name(path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _absolute(node: ast.ImportFrom, path) -> str:
    """The module an ``import from`` names, relative imports resolved."""
    if not node.level:
        return node.module or ""
    package = _module_name(path).split(".")
    package = package if path.name == "__init__.py" else package[:-1]
    package = package[: len(package) - node.level + 1]
    return ".".join(package + ([node.module] if node.module else []))


def _imported(node: ast.AST, path) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        return [_absolute(node, path)]
    return []


def _function_imports(path) -> list[tuple[str, str, str, int]]:
    """(path, function, module, line) of every rg_verl import inside a function of ``path``."""
    tree = ast.parse(path.read_text())
    found = []
    for function in ast.walk(tree):
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            for node in ast.walk(function):
                for module in _imported(node, path):
                    if module.split(".")[0] == "rg_verl":
                        found.append((str(path.relative_to(REPO)), function.name, module, node.lineno))
    return found


def _all_function_imports() -> list[tuple[str, str, str, int]]:
    return [entry for path in sorted(PACKAGE.rglob("*.py")) for entry in _function_imports(path)]


def test_no_rg_verl_import_inside_a_function_unless_deliberately_lazy():
    found = {entry[:3] for entry in _all_function_imports()}
    hidden = sorted(found - LAZY_IMPORTS)
    assert not hidden, (
        "import these at the top of the module (or, if one is deliberately lazy for a cost, say why in a comment "
        f"at the import and list it in LAZY_IMPORTS): {hidden}"
    )
    assert LAZY_IMPORTS <= found, f"LAZY_IMPORTS lists imports that are gone: {sorted(LAZY_IMPORTS - found)}"


def test_each_lazy_import_says_why_in_a_comment():
    for path, function, module, line in _all_function_imports():
        if (path, function, module) not in LAZY_IMPORTS:
            continue  # the test above names it
        above = (REPO / path).read_text().splitlines()[max(0, line - 4) : line]
        assert any("#" in text and "lazy" in text for text in above), (
            f"{path}:{line} ({function}): say in a comment at the import why {module} is imported lazily"
        )


def _top_level_imports(path) -> set[str]:
    """The rg_verl modules ``path`` imports when it is imported (``if TYPE_CHECKING:`` blocks left out)."""
    modules, body = set(), list(ast.parse(path.read_text()).body)
    while body:
        node = body.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        if isinstance(node, ast.If | ast.Try):
            body += node.body + node.orelse + [n for h in getattr(node, "handlers", []) for n in h.body]
        for name in _imported(node, path):
            if isinstance(node, ast.ImportFrom):  # ``from a import b`` imports a.b when b is a module
                modules.update(f"{name}.{alias.name}" for alias in node.names)
            modules.add(name)
    return {m for m in modules if m.split(".")[0] == "rg_verl"}


def test_the_module_graph_across_packages_has_no_cycle():
    """A cycle through two packages (config -> data.formats -> reward -> config) fails whichever imports first."""
    paths = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in paths.items():
        edges = set()
        for module in _top_level_imports(path):
            parts = module.split(".")
            # importing a.b.c runs a and a.b first; a package's own __init__ importing its modules is no cycle
            prefixes = {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
            edges |= {p for p in prefixes if p in paths and p != name and not name.startswith(p + ".")}
        graph[name] = edges
    done, stack = set(), []

    def visit(node):
        stack.append(node)
        for nxt in sorted(graph[node]):
            assert nxt not in stack, "import cycle: " + " -> ".join(stack[stack.index(nxt) :] + [nxt])
            if nxt not in done:
                visit(nxt)
        stack.pop()
        done.add(node)

    for node in sorted(graph):
        if node not in done:
            visit(node)
