"""The ``rg-verl`` console command: subcommand help, ``train``'s config folders, and the ``demo`` loop."""

import io
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from rg_verl.data.dataset import ReasoningGymDataset
from rg_verl.evaluation.demo import run_demo, split_response
from rg_verl.grpo.launch import hydra_argv, resolve_config_dir
from rg_verl.tiny_model import build_tiny_model
from tests.helpers import REPO

RG_VERL = Path(sys.executable).parent / "rg-verl"


def rg_verl(*args: str, cwd: Path = REPO, stdin: str | None = None, timeout: int = 300):
    assert RG_VERL.is_file(), f"{RG_VERL} is missing: run `pip install --no-deps -e .`"
    return subprocess.run([str(RG_VERL), *args], cwd=cwd, input=stdin, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("cli") / "tiny")


# --- help of the console script -------------------------------------------------------------------


@pytest.mark.parametrize(
    "command, expected",
    [
        ("train", ["rg-verl train", "--config-path", "--config-name", "key=value", "+dry_run=true"]),
        ("evaluate", ["rg-verl evaluate", "--config", "--model-path", "--resume"]),
        ("convert", ["rg-verl convert", "checkpoint", "out_dir", "--dtype", "--keep-lora", "--verify"]),
        ("demo", ["rg-verl demo", "model_dir", "--max-tokens", "--temperature", "--system-prompt", ":item"]),
    ],
)
def test_each_subcommand_has_help(command, expected):
    proc = rg_verl(command, "--help")
    assert proc.returncode == 0, proc.stderr
    for text in expected:
        assert text in proc.stdout


def test_the_command_lists_its_subcommands_and_rejects_others():
    proc = rg_verl("--help")
    assert proc.returncode == 0
    assert all(name in proc.stdout for name in ("train", "evaluate", "convert", "demo"))
    proc = rg_verl("fly")
    assert proc.returncode == 2 and "invalid choice: 'fly'" in proc.stderr
    assert rg_verl().returncode == 2


# --- train: config folders ------------------------------------------------------------------------


def test_a_relative_config_path_is_found_in_the_working_directory_then_the_repository(tmp_path):
    (tmp_path / "mine").mkdir()
    root = tmp_path / "repo"
    (root / "configs" / "smoke").mkdir(parents=True)
    (root / "configs" / "inter").mkdir()
    assert resolve_config_dir("mine", cwd=tmp_path, root=root) == str((tmp_path / "mine").resolve())
    assert resolve_config_dir("configs/inter", cwd=tmp_path, root=root) == str((root / "configs" / "inter").resolve())
    assert resolve_config_dir(None, cwd=tmp_path, root=root) == str(root / "configs" / "smoke")
    assert resolve_config_dir(str(tmp_path / "mine"), cwd=root, root=root) == str(tmp_path / "mine")
    assert resolve_config_dir("pkg://somewhere.conf", cwd=tmp_path, root=root) == "pkg://somewhere.conf"
    with pytest.raises(FileNotFoundError, match="'nowhere' not found"):
        resolve_config_dir("nowhere", cwd=tmp_path, root=root)
    with pytest.raises(FileNotFoundError, match="pass --config-path"):
        resolve_config_dir(None, cwd=tmp_path, root=tmp_path / "installed-without-configs")


def test_hydra_gets_an_absolute_config_path_and_every_other_argument_in_order():
    args = hydra_argv(["a=1", "--cfg", "job", "-cn", "learn", "+b=2", "-m", "--config-path=configs/smoke"])
    assert args[:4] == ["--config-path", str(REPO / "configs" / "smoke"), "--config-name", "learn"]
    assert args[4:] == ["--cfg", "job", "a=1", "+b=2", "-m", "hydra.job.name=train_grpo"]
    assert hydra_argv([])[:4] == ["--config-path", str(REPO / "configs" / "smoke"), "--config-name", "cpu"]
    # -c is Hydra's short --cfg, not an abbreviation of -cp or -cn
    assert hydra_argv(["-c", "job"])[4:6] == ["--cfg", "job"]


def test_train_with_a_missing_config_folder_is_a_usage_error(tmp_path):
    proc = rg_verl("train", "--config-path", "no/such/folder", cwd=tmp_path)
    assert proc.returncode == 2
    assert "config folder 'no/such/folder' not found" in proc.stderr


def test_train_dry_run_prints_what_the_script_prints(tmp_path):
    args = [
        "--config-path", "configs/inter_generalisation", "--config-name", "algorithmic_qwen_3b", "+dry_run=true",
        f"actor_rollout_ref.model.path={tmp_path}",
    ]  # fmt: skip
    cli = rg_verl("train", *args, f"hydra.run.dir={tmp_path / 'cli'}")
    script = subprocess.run(
        [sys.executable, str(REPO / "train_grpo.py"), *args, f"hydra.run.dir={tmp_path / 'script'}"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert cli.returncode == 0 and script.returncode == 0, cli.stderr[-2000:] + script.stderr[-2000:]
    assert "--- train[0] reasoning_gym/" in cli.stdout and "--- val[0] reasoning_gym/" in cli.stdout
    assert cli.stdout == script.stdout
    assert (tmp_path / "cli" / "train_grpo.log").is_file()  # Hydra's job name is the script's


def test_train_dry_run_with_a_config_folder_relative_to_the_working_directory(tmp_path):
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "mine.yaml").write_text(
        "hydra:\n  searchpath: [pkg://verl.trainer.config, pkg://rg_verl.conf]\n"
        "defaults: [ppo_trainer, rg_verl_base, _self_]\n"
        "reasoning_gym:\n  datasets:\n    leg_counting: {weight: 1.0}\n"
    )
    proc = rg_verl(
        "train", "--config-path", "experiments", "--config-name", "mine", "+dry_run=true",
        f"actor_rollout_ref.model.path={tmp_path}", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "--- train[0] reasoning_gym/leg_counting" in proc.stdout


# --- demo -----------------------------------------------------------------------------------------


def eval_item(name: str, index: int, seed: int = 42) -> dict:
    """Item ``index`` of ``name``'s evaluation split, built as the evaluation builds its items."""
    section = {"datasets": {name: {"weight": 1}}, "seed": seed, "eval_size": index + 1, "system_prompt": ""}
    config = OmegaConf.create({"reasoning_gym": section})
    return ReasoningGymDataset("reasoning_gym://eval", None, config)[index]


def test_split_response():
    assert split_response("<think> a b </think>\n<answer> 4 </answer>") == ("a b", "4")
    assert split_response("a b </think> <answer>4</answer>") == ("a b", "4")  # the template opened the think
    assert split_response("no tags") == (None, None)


def test_a_correct_answer_to_a_dataset_item_scores_one():
    item = eval_item("chain_sum", 3)
    truth = item["reward_model"]["ground_truth"]
    prompts = []

    def generate(messages):
        prompts.append(messages)
        return f"<think>adding up</think>\n<answer>{truth}</answer>"

    out = io.StringIO()
    assert run_demo([":item chain_sum 3\n"], out, generate) == 0
    text = out.getvalue()
    question = item["raw_prompt"][-1]["content"]
    assert question in text
    assert "--- think\nadding up" in text and f"--- answer\n{truth}" in text
    assert f"--- reference\n{truth}" in text and "score: 1.00" in text
    from reasoning_gym.utils import SYSTEM_PROMPTS

    assert prompts == [
        [{"role": "system", "content": SYSTEM_PROMPTS["default"]}, {"role": "user", "content": question}]
    ]


def test_a_wrong_answer_scores_zero_and_items_advance_without_an_index():
    out = io.StringIO()
    run_demo([":item leg_counting", ":item leg_counting"], out, lambda m: "<answer>-1</answer>", seed=7)
    text = out.getvalue()
    assert "leg_counting #0" in text and "leg_counting #1" in text
    assert eval_item("leg_counting", 1, seed=7)["raw_prompt"][-1]["content"] in text
    assert text.count("score: 0.00") == 2


def test_a_free_question_is_answered_without_a_score():
    seen = []

    def generate(messages):
        seen.append(messages)
        return "<think>easy</think><answer>4</answer>"

    out = io.StringIO()
    run_demo(["what is 2+2?"], out, generate, system_prompt="be brief")
    text = out.getvalue()
    assert "what is 2+2?" in text and "--- think\neasy" in text and "--- answer\n4" in text
    assert "score" not in text and "reference" not in text
    assert seen == [[{"role": "system", "content": "be brief"}, {"role": "user", "content": "what is 2+2?"}]]


def test_bad_commands_and_unknown_datasets_are_explained_and_the_loop_goes_on():
    asked = []
    lines = [":frobnicate", ":", ":item chian_sum", ":item", ":item chain_sum x", ":item chain_sum 100000000",
             ":help", "", "still here?", ":quit", "never asked"]  # fmt: skip
    out = io.StringIO()
    assert run_demo(lines, out, lambda m: asked.append(m[-1]["content"]) or "no tags \x1b[2J") == 0
    text = out.getvalue()
    assert "unknown command ':frobnicate'" in text and "unknown command ':'" in text
    assert "unknown reasoning-gym dataset 'chian_sum'" in text and "chain_sum" in text
    assert text.count("usage: :item <dataset> [index]") == 2
    assert "out of range" in text and ":item <dataset> [index]" in text
    assert asked == ["still here?"]  # nothing after :quit
    assert "(no <answer>...</answer> in the response)" in text
    assert "\x1b" not in text and "\\x1b[2J" in text  # model output cannot drive the terminal


def test_a_failing_generation_does_not_end_the_session():
    def generate(messages):
        if "boom" in messages[-1]["content"]:
            raise RuntimeError("out of memory")
        return "<answer>ok</answer>"

    out = io.StringIO()
    run_demo(["boom", "fine"], out, generate)
    assert "generation failed: RuntimeError('out of memory')" in out.getvalue()
    assert "--- answer\nok" in out.getvalue()


def test_demo_on_a_tiny_model_from_piped_stdin(tiny_model):
    stdin = ":item chain_sum 0\nwhat is 2+2?\n:oops\n:item no_such_dataset\n:help\n"  # ends at EOF, no :quit
    proc = rg_verl("demo", str(tiny_model), "--max-tokens", "4", "--device", "cpu", stdin=stdin)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert eval_item("chain_sum", 0)["raw_prompt"][-1]["content"] in out
    assert "--- reference\n" in out and "score: " in out
    assert "=== question\nwhat is 2+2?" in out
    assert "unknown command ':oops'" in out and "unknown reasoning-gym dataset 'no_such_dataset'" in out
    assert out.startswith("=== chain_sum #0") and "\n> " not in out  # no prompt when stdin is not a terminal


def test_demo_with_a_missing_model_fails_cleanly(tmp_path):
    proc = rg_verl("demo", str(tmp_path / "missing"), "--device", "cpu", stdin="")
    assert proc.returncode == 1
    assert "cannot load a model" in proc.stderr and "Traceback" not in proc.stderr
