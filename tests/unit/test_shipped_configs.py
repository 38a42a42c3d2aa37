"""Every shipped config composes, passes our validation and verl's, and means what its name says.

The parametrized tests follow the directory listing of ``configs/``: a new YAML is covered the
moment it exists. Files named ``_*.yaml`` are shared layers that experiment configs list in their
defaults; they are not configs on their own.
"""

import contextlib
import copy
import dataclasses
import functools
import importlib.util
import inspect
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf
from reasoning_gym.factory import DATASETS

import rg_verl.data.config
import rg_verl.reward.config
from rg_verl.config import validate
from rg_verl.grpo.launch import apply_device_settings
from rg_verl.grpo.metrics import dataset_category
from rg_verl.reward import compute_score
from tests.helpers import REPO

CONFIGS_DIR = REPO / "configs"
PACKAGE = REPO / "rg_verl"

# train_grpo.py's configs; configs/oreo/ holds train_oreo.py's and configs/compare/ rg-verl compare's (their own
# tests check those: tests/unit/oreo/test_config.py, tests/unit/compare/test_config.py)
CONFIGS = sorted(
    p for p in CONFIGS_DIR.rglob("*.yaml") if not p.name.startswith("_") and p.parent.name not in ("oreo", "compare")
)
SHARED_LAYERS = sorted(p for p in CONFIGS_DIR.rglob("_*.yaml"))
# the GPU experiments; smoke/ holds the CPU smoke config
EXPERIMENTS = [p for p in CONFIGS if p.parent.name != "smoke"]
# the reasoning-gym experiments share the reference project's GRPO setup; math/ trains 7B models on files
REFERENCE_EXPERIMENTS = [p for p in EXPERIMENTS if p.parent.name != "math"]


def config_id(path: Path) -> str:
    return str(path.relative_to(CONFIGS_DIR).with_suffix(""))


def in_dir(name: str) -> list[Path]:
    return [p for p in CONFIGS if p.parent.name == name]


@contextlib.contextmanager
def working_directory(path: str):
    # contextlib.chdir is Python >= 3.11; we support 3.10
    previous = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(previous)


@functools.cache
def _composed(path: Path, overrides: tuple[str, ...]) -> DictConfig:
    # compose from a directory outside the repository: no config may depend on the working directory
    with working_directory(tempfile.gettempdir()):
        with initialize_config_dir(config_dir=str(path.parent), version_base=None):
            return compose(config_name=path.stem, overrides=list(overrides))


def composed(path: Path, overrides: tuple[str, ...] = ()) -> DictConfig:
    """The composed config of ``path`` (a copy: tests may change it)."""
    return copy.deepcopy(_composed(path, overrides))


def verl_validate(config: DictConfig) -> None:
    """verl's own checks, as train_grpo.py runs them (after the device settings; none on cuda)."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    apply_device_settings(config)
    validate_config(config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))


def mix(config: DictConfig, section: str) -> dict:
    """``reasoning_gym.<section>`` as a plain dict ({} when absent)."""
    value = config.reasoning_gym.get(section)
    return OmegaConf.to_container(value, resolve=True) if value else {}


def test_the_experiment_configs_exist():
    names = {config_id(p) for p in CONFIGS}
    inter = ["algorithmic", "algebra", "logic", "games", "arithmetic", "cognition", "geometry", "graphs", "arc"]
    intra = ["algebra", "algorithmic", "arithmetic", "cognition", "games", "graphs"]
    expected = {f"inter_generalisation/{c}_qwen_3b" for c in inter}
    expected |= {f"intra_generalisation/{c}_qwen_3b" for c in intra}
    expected |= {"external_benchmarks/rg_math_llama_3b", "external_benchmarks/rg_math_qwen_3b"}
    expected |= {f"curriculum/{n}" for n in ("knights_knaves_curriculum", "knights_knaves_no_curriculum")}
    expected |= {"curriculum/spell_backward_curriculum"}
    expected |= {"math/gsm8k_qwen_7b", "math/math_qwen_7b", "math/gsm8k_qwen_7b_lora"}
    expected |= {"math/gsm8k_reasoning_rl", "math/gsm8k_reasoning_rl_lora"}
    assert expected <= names, f"missing: {sorted(expected - names)}"


@pytest.mark.parametrize("path", CONFIGS, ids=config_id)
def test_config_composes_and_passes_our_validation(path):
    config = composed(path)
    settings = validate(config)
    assert settings.datasets
    # our section reaches the dataset through verl's data config
    assert OmegaConf.to_container(config.data.reasoning_gym, resolve=True) == OmegaConf.to_container(
        config.reasoning_gym, resolve=True
    )


@pytest.mark.filterwarnings("ignore:Disabled critic")  # GRPO has no critic, as intended
@pytest.mark.parametrize("path", CONFIGS, ids=config_id)
def test_config_passes_verl_validation(path):
    config = composed(path)
    if config.actor_rollout_ref.model.lora_rank > 0 and importlib.util.find_spec("vllm") is None:
        # verl checks a LoRA rank against vLLM's supported ranks by importing vLLM, a GPU-only package;
        # check the rank against that list here and the rest of the config through verl
        assert config.actor_rollout_ref.model.lora_rank in VLLM_LORA_RANKS
        config.actor_rollout_ref.rollout.name = "hf"
    verl_validate(config)


# the LoRA ranks vLLM serves (verl.workers.rollout.vllm_rollout.utils.get_vllm_max_lora_rank)
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


# the overrides README.md gives for running the 4-GPU experiments on a smaller node
SMALLER_NODES = {
    "1gpu": (
        "trainer.n_gpus_per_node=1",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.4",
        "actor_rollout_ref.actor.fsdp_config.param_offload=true",
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload=true",
    ),
    "2gpu": ("trainer.n_gpus_per_node=2", "actor_rollout_ref.rollout.gpu_memory_utilization=0.5"),
}


@pytest.mark.filterwarnings("ignore:Disabled critic")
@pytest.mark.parametrize("node", SMALLER_NODES)
def test_readme_overrides_for_smaller_nodes_pass_verl_validation(node):
    config = composed(CONFIGS_DIR / "inter_generalisation" / "algorithmic_qwen_3b.yaml", SMALLER_NODES[node])
    verl_validate(config)
    assert config.trainer.n_gpus_per_node % config.actor_rollout_ref.rollout.tensor_model_parallel_size == 0


@pytest.mark.parametrize("path", CONFIGS, ids=config_id)
def test_config_names_only_registered_datasets(path):
    config = composed(path)
    for section in ("datasets", "val_datasets"):
        generated = {name for name, spec in mix(config, section).items() if not (spec or {}).get("source")}
        unknown = generated - set(DATASETS)
        assert not unknown, f"reasoning_gym.{section} names unknown datasets {sorted(unknown)}"


# the reference project's run lengths: 500 steps unless listed (by config name, then by folder)
EXPERIMENT_STEPS = {
    "external_benchmarks": 2000,
    "knights_knaves_curriculum": 300,
    "knights_knaves_no_curriculum": 300,
    "spell_backward_curriculum": 400,
}


@pytest.mark.parametrize("path", REFERENCE_EXPERIMENTS, ids=config_id)
def test_experiment_uses_the_reference_grpo_setup(path):
    """The GRPO setup every reasoning-gym experiment shares; test_reference_experiments.py checks each value."""
    config = composed(path)
    actor, rollout = config.actor_rollout_ref.actor, config.actor_rollout_ref.rollout
    assert config.algorithm.adv_estimator == "grpo"
    assert rollout.name == "vllm" and rollout.n == 8
    assert actor.optim.lr == pytest.approx(1e-6)
    assert actor.use_kl_loss and actor.kl_loss_coef == pytest.approx(0.001) and actor.kl_loss_type == "low_var_kl"
    assert not config.algorithm.use_kl_in_reward
    assert actor.entropy_coeff == pytest.approx(0.001)
    assert config.data.train_batch_size == 32 and config.data.train_batch_size % actor.ppo_mini_batch_size == 0
    assert config.reasoning_gym.system_prompt == "DeepSeekZero"
    # one whole prompt + response must fit in a packed micro-batch
    assert actor.use_dynamic_bsz
    assert actor.ppo_max_token_len_per_gpu >= config.data.max_prompt_length + config.data.max_response_length
    assert config.trainer.n_gpus_per_node % rollout.tensor_model_parallel_size == 0
    assert config.trainer.device == "cuda" and config.trainer.n_gpus_per_node == 4
    terms = config.reward.custom_reward_function.reward_kwargs.terms
    ours = {name: weight for name, weight in terms.items() if not name.startswith("reference_") and weight}
    assert not ours, f"the experiments shape the reward with the reference's terms only, not {ours}"
    assert terms.reference_format > 0, "every reference experiment has the reference's format reward"
    steps = config.trainer.total_training_steps
    assert steps == EXPERIMENT_STEPS.get(path.stem, EXPERIMENT_STEPS.get(path.parent.name, 500)), steps
    # every training prompt of the run is a fresh item: the run ends after its steps or its epochs
    epoch = config.reasoning_gym.train_size // config.data.train_batch_size
    assert min(steps, epoch * config.trainer.total_epochs) <= epoch


# a math config's model: Qwen2.5-7B-Instruct, or the one a published recipe names (by config name, without _lora)
MATH_MODELS = {"gsm8k_reasoning_rl": "Qwen/Qwen2.5-7B"}


@pytest.mark.parametrize("path", in_dir("math"), ids=config_id)
def test_math_config_trains_qwen_7b_with_grpo_on_its_benchmark_file(path):
    config = composed(path)
    actor, rollout = config.actor_rollout_ref.actor, config.actor_rollout_ref.rollout
    model = MATH_MODELS.get(path.stem.removesuffix("_lora"), "Qwen/Qwen2.5-7B-Instruct")
    assert config.actor_rollout_ref.model.path == model
    assert config.algorithm.adv_estimator == "grpo" and rollout.name == "vllm" and rollout.n == 8
    assert actor.use_kl_loss and actor.kl_loss_type == "low_var_kl"
    assert config.trainer.device == "cuda"
    assert config.trainer.n_gpus_per_node % rollout.tensor_model_parallel_size == 0
    benchmark = path.stem.split("_")[0]
    (name, spec), *others = mix(config, "datasets").items()
    assert not others and name == benchmark and spec["source"]["format"] == benchmark
    assert spec["source"]["train"].endswith(f"{benchmark}/train.{'parquet' if benchmark == 'gsm8k' else 'jsonl'}")
    assert "/test." in spec["source"]["val"]
    lora = config.actor_rollout_ref.model.lora_rank
    if path.stem.endswith("_lora"):
        # the 7B model on one GPU: rank-64 adapters, the engine loads the base weights itself
        assert lora == 64 and config.trainer.n_gpus_per_node == 1 and rollout.tensor_model_parallel_size == 1
        assert rollout.load_format == "safetensors" and rollout.layered_summon
        assert config.actor_rollout_ref.model.target_modules == "all-linear"
    else:
        assert lora == 0 and config.trainer.n_gpus_per_node == 8
    if benchmark == "math":  # the level curriculum: from max level 3 up to 5
        assert config.reasoning_gym.curriculum.enabled
        assert config.reasoning_gym.curriculum.levels.math.max_level == 3 and spec["config"]["max_level"] == 5


@pytest.mark.parametrize("path", in_dir("inter_generalisation"), ids=config_id)
def test_inter_config_trains_on_its_own_category(path):
    category = path.stem.split("_qwen")[0]
    config = composed(path)
    names = mix(config, "datasets")
    assert {dataset_category(n) for n in names} == {category}
    assert not mix(config, "val_datasets"), "inter-domain configs validate in-domain; transfer is evaluated after"
    # one thinking model beside the family's Qwen2.5-3B-Instruct
    model = "Qwen/Qwen3-4B-Thinking-2507" if path.stem == "algorithmic_qwen3_4b" else "Qwen/Qwen2.5-3B-Instruct"
    assert config.actor_rollout_ref.model.path == model


@pytest.mark.parametrize("path", in_dir("intra_generalisation"), ids=config_id)
def test_intra_config_validates_on_held_out_datasets_of_its_category(path):
    category = path.stem.removesuffix("_qwen_3b")
    config = composed(path)
    train, val = set(mix(config, "datasets")), set(mix(config, "val_datasets"))
    assert val, "an intra-domain config needs reasoning_gym.val_datasets (the held-out datasets)"
    assert not train & val, f"datasets both trained on and held out: {sorted(train & val)}"
    assert {dataset_category(n) for n in train | val} == {category}
    whole = {n for n in DATASETS if dataset_category(n) == category}
    assert train | val == whole, f"neither trained on nor held out: {sorted(whole - train - val)}"


def test_external_benchmark_configs_train_both_models_on_the_same_math_mix():
    configs = {p.stem: composed(p) for p in in_dir("external_benchmarks")}
    models = {c.actor_rollout_ref.model.path for c in configs.values()}
    assert models == {"meta-llama/Llama-3.2-3B-Instruct", "Qwen/Qwen2.5-3B-Instruct"}
    mixes = [mix(c, "datasets") for c in configs.values()]
    assert all(m == mixes[0] for m in mixes)
    assert {dataset_category(n) for n in mixes[0]} <= {"arithmetic", "algebra", "geometry"}


def test_knights_knaves_runs_with_and_without_curriculum_share_model_steps_and_validation():
    with_curriculum = composed(CONFIGS_DIR / "curriculum" / "knights_knaves_curriculum.yaml")
    without = composed(CONFIGS_DIR / "curriculum" / "knights_knaves_no_curriculum.yaml")
    validated_on = [mix(c, "val_datasets") or mix(c, "datasets") for c in (with_curriculum, without)]
    assert validated_on[0] == validated_on[1]
    shared = ("actor_rollout_ref.model.path", "trainer.total_training_steps", "data.train_batch_size")
    shared += ("actor_rollout_ref.actor.ppo_mini_batch_size", "data.max_prompt_length", "data.max_response_length")
    shared += ("reward.custom_reward_function.reward_kwargs", "reasoning_gym.system_prompt")
    for key in shared:
        assert OmegaConf.select(with_curriculum, key) == OmegaConf.select(without, key), key


def test_experiment_command_composes_and_draws_items_from_any_directory(tmp_path):
    """The README command, with a relative --config-path, run from outside the repo (+dry_run: no Ray)."""
    config = CONFIGS_DIR / "intra_generalisation" / "algorithmic_qwen_3b.yaml"
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "train_grpo.py"),
            "--config-path",
            "configs/intra_generalisation",
            "--config-name",
            config.stem,
            "+dry_run=true",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    sources = defaultdict(set)
    for line in proc.stdout.splitlines():
        if line.startswith("--- "):  # "--- <split>[<index>] reasoning_gym/<dataset>"
            split, source = line[4:].split(" ", 1)
            sources[split.split("[")[0]].add(source.removeprefix("reasoning_gym/"))
    expected = composed(config)
    assert sources["train"] and sources["train"] <= set(mix(expected, "datasets"))
    assert sources["val"] and sources["val"] <= set(mix(expected, "val_datasets"))


# --- every key of our sections is read by the code that uses it ----------------------------------


SCHEMA_MODULES = (rg_verl.data.config, rg_verl.reward.config)


def _section_classes() -> list[type]:
    """The dataclasses of the data and reward schemas: one per section (or sub-section) of our config."""
    return [
        obj
        for module in SCHEMA_MODULES
        for obj in vars(module).values()
        if inspect.isclass(obj) and dataclasses.is_dataclass(obj) and obj.__module__ == module.__name__
    ]


SCHEMA_FILES = {module.__file__ for module in SCHEMA_MODULES} | {str(PACKAGE / "common" / "schema.py")}


def _read_by_a_user(frame, accessors: set[str]) -> bool:
    """Whether the field read at ``frame`` is code in rg_verl/ using the config, not parsing or validating it.

    A read inside a config class's accessor (``settings.mix(split)``) counts for the code that calls it.
    """
    while frame is not None and frame.f_code.co_filename in SCHEMA_FILES:
        if frame.f_code.co_name not in accessors:
            return False
        frame = frame.f_back
    return frame is not None and frame.f_code.co_filename.startswith(str(PACKAGE))


def record_field_reads(monkeypatch, classes: list[type]) -> dict[type, set[str]]:
    """From now on, the fields of ``classes`` that code outside the schema modules reads."""
    reads = defaultdict(set)
    accessors = {
        name
        for cls in classes
        for name, member in vars(cls).items()
        if inspect.isfunction(member) and not name.startswith("_") and name != "validate"
    }
    for cls in classes:
        names = {f.name for f in dataclasses.fields(cls)}

        def getattribute(self, name, cls=cls, names=names):
            if name in names and _read_by_a_user(sys._getframe(1), accessors):
                reads[cls].add(name)
            return object.__getattribute__(self, name)

        monkeypatch.setattr(cls, "__getattribute__", getattribute)
    return reads


def test_every_reasoning_gym_field_is_read_by_the_code_that_uses_it(monkeypatch, math_data):
    """Train on a section that sets every field (the checks, the three splits, curriculum steps): each is read."""
    from rg_verl.data.dataset import ReasoningGymDataset
    from rg_verl.data.files import check_sources

    # the reward's sections are checked by test_every_reward_key_changes_the_reward
    reward = (rg_verl.reward.config.RewardConfig, rg_verl.reward.config.ReferenceTermsConfig)
    classes = [cls for cls in _section_classes() if cls not in reward]
    reads = record_field_reads(monkeypatch, classes)
    gsm8k = {"format": "gsm8k", "train": str(math_data / "gsm8k/train.parquet"), "val": "unused.jsonl"}
    section = {
        "datasets": {"chain_sum": {"weight": 2.0, "config": {"max_terms": 3}}, "gsm8k": {"source": gsm8k}},
        "val_datasets": {"leg_counting": {}},
        **{"seed": 7, "train_size": 16, "val_size": 4, "eval_size": 4, "system_prompt": "Answer."},
        "curriculum": {"enabled": True, "levels": {"chain_sum": {"*": 1}}, "last_k": 4, "min_samples": 2},
        "adaptive_weights": {"enabled": True, "window": 4, "min_samples": 2, "floor": 0.5},
    }
    check_sources(rg_verl.data.config.ReasoningGymConfig.from_section(section))
    data = OmegaConf.create({"reasoning_gym": section})
    splits = {split: ReasoningGymDataset(f"reasoning_gym://{split}", None, data) for split in ("train", "val", "eval")}
    for dataset in splits.values():
        assert dataset[0]["raw_prompt"][0]["content"] == "Answer."
    for _ in range(3):  # a middling success rate: both thresholds are consulted
        splits["train"].update({"chain_sum": [1.0, 0.0], "gsm8k": [1.0, 0.0]})
    for cls in classes:
        unread = sorted({f.name for f in dataclasses.fields(cls)} - reads[cls])
        assert not unread, f"{cls.__name__}: {unread} accepted in configs but not read by rg_verl/ outside config.py"


@pytest.fixture(scope="module")
def tokenizer_path(tmp_path_factory) -> str:
    from rg_verl.cpu.tiny_model import build_tiny_model

    return str(build_tiny_model(tmp_path_factory.mktemp("tokenizer") / "model"))


def test_every_reward_key_changes_the_reward(tokenizer_path, tmp_path):
    """Each field of reward_kwargs, set away from its default, changes what compute_score returns."""
    from reasoning_gym.factory import create_dataset

    entry = create_dataset("chain_sum", seed=1, size=1)[0]
    answer = entry["answer"]

    def score(response: str, **kwargs) -> dict:
        return compute_score("reasoning_gym/chain_sum", response, answer, {"entry": entry}, **kwargs)

    bare = f"<answer>{answer}</answer>"  # right, but not in the strict format
    assert score(bare)["score"] == 1.0 and score(bare, mode="strict")["score"] == 0.0
    formatted = f"<think>x</think>{bare}"
    assert score(formatted, terms={"format": 0.5})["score"] == score(formatted)["score"] + 0.5
    # math-verify takes an equivalent fraction the dataset's own scorer refuses
    fraction = f"<answer>{int(answer) * 2}/2</answer>"
    assert score(fraction)["score"] == 0.0 and score(fraction, math_datasets=["chain_sum"])["score"] == 1.0
    # the length term counts tokens with the tokenizer, against the response budget
    long_budget = score(formatted, terms={"length": 1.0}, tokenizer_path=tokenizer_path, max_response_length=4096)
    short_budget = score(formatted, terms={"length": 1.0}, tokenizer_path=tokenizer_path, max_response_length=4)
    assert long_budget["response_tokens"] > 0 and "response_tokens" not in score(formatted)
    assert short_budget["term/length"] < long_budget["term/length"] < 0
    # reference_terms sets the reference terms' options: the length scale in characters, <think> put first
    wrong = f"<think>x</think><answer>{int(answer) + 1}</answer>"
    length = {"reference_length": 1.0}
    assert score(wrong, terms=length)["term/reference_length"] < 1.0
    assert score(wrong, terms=length, reference_terms={"max_output_length": 4})["term/reference_length"] == 1.0
    rest = f"x</think>{bare}"  # the rest of a response whose prompt ended in <think>
    reference_format = {"reference_format": 1.0}
    assert score(rest, terms=reference_format)["term/reference_format"] == 0.0
    options = {"preappend_thinking_token": True}
    assert score(rest, terms=reference_format, reference_terms=options)["term/reference_format"] == 1.0
    # gates: a format term gated on correct pays nothing for a wrong answer in the format
    assert score(wrong, terms={"format": 0.5})["term/format"] == 1.0
    assert score(wrong, terms={"format": 0.5}, gates={"format": "correct"})["term/format"] == 0.0
    # response_prefix: the text a thinking template opened the turn with counts for the format
    assert score(rest)["format_ok"] == 0.0 and score(rest, response_prefix="<think>")["format_ok"] == 1.0
    # chat_template_kwargs: auto renders a thinking template with them (thinking off: an empty think block)
    from rg_verl.cpu.tiny_model import _train_tokenizer

    _train_tokenizer(300, 0, 512, thinking_template=True).save_pretrained(tmp_path)
    assert score(bare, tokenizer_path=str(tmp_path))["format_ok"] == 0.0
    off = {"enable_thinking": False}
    assert score(bare, tokenizer_path=str(tmp_path), chat_template_kwargs=off)["format_ok"] == 1.0
    declared = {f.name for f in dataclasses.fields(rg_verl.reward.config.RewardConfig)}
    assert declared == {
        "mode", "terms", "gates", "tokenizer_path", "max_response_length", "math_datasets", "reference_terms",
        "response_prefix", "chat_template_kwargs",
    }, "a new reward key needs a line above that shows its effect"  # fmt: skip


def test_every_reward_key_is_a_parameter_of_the_reward_function():
    """verl calls compute_score(**reward_kwargs); a key it does not name would vanish into **kwargs."""
    parameters = inspect.signature(compute_score).parameters
    for field in dataclasses.fields(rg_verl.reward.config.RewardConfig):
        assert field.name in parameters, f"reward_kwargs.{field.name} is not a parameter of compute_score"


def evaluation_configs(path: Path) -> list[Path]:
    """The shipped evaluation configs that measure the models trained by ``path``."""
    folder = REPO / "evaluation" / "configs" / path.parent.name
    if path.parent.name in ("inter_generalisation", "intra_generalisation"):
        return sorted(folder.glob("*.yaml"))  # each model is evaluated on every category
    if path.parent.name == "math":
        name = "gsm8k_reasoning_rl" if "reasoning_rl" in path.stem else path.stem.split("_")[0]
        return [folder / f"{name}.yaml"]
    return [folder / path.name]


@pytest.mark.parametrize("path", EXPERIMENTS, ids=config_id)
def test_validation_samples_as_the_experiment_s_evaluation_does(path):
    """In-training validation and evaluate_model.py measure a model with the same sampling (val_sampling)."""
    import yaml

    val = composed(path).actor_rollout_ref.rollout.val_kwargs
    for evaluation in evaluation_configs(path):
        settings = yaml.safe_load(evaluation.read_text())
        expected = (settings["temperature"] > 0, settings["temperature"], settings["top_p"], settings["eval_repeats"])
        assert (val.do_sample, val.temperature, val.top_p, val.n) == expected, evaluation


def test_the_val_sampling_switch_sets_the_evaluator_s_sampling():
    smoke = CONFIGS_DIR / "smoke" / "cpu.yaml"
    assert OmegaConf.to_container(composed(smoke).actor_rollout_ref.rollout.val_kwargs) == {
        "_target_": "verl.workers.config.SamplingConfig", "top_k": -1, "top_p": 1.0, "temperature": 0, "n": 1,
        "do_sample": False,
    }  # fmt: skip
    val = composed(smoke, ("val_sampling=evaluator",)).actor_rollout_ref.rollout.val_kwargs
    assert (val.do_sample, val.temperature, val.top_p, val.n) == (True, 0.6, 0.9, 3)
