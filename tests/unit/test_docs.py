"""The README and the pages of docs/ point at things that exist: every relative link, every repository path quoted in
backticks, and every command of a code block (its script or module, its rg-verl subcommand, each ``--option`` it
passes, its config file or Hydra config, its make target)."""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import io
import re
import shlex
from pathlib import Path

import pytest

from rg_verl import cli
from tests.helpers import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
QUOTED_PATH = re.compile(r"`((?:rg_verl|configs|evaluation|bench|tests|utils|docs)/[^`\s]*)`")
PLACEHOLDER = re.compile(r"[<>…*{}$\[\]]|\.\.\.|^~")
# scripts that are doors to an rg-verl subcommand: their options are the subcommand's
SCRIPT_COMMANDS = {
    "train_grpo.py": ("train",),
    "train_oreo.py": ("oreo", "train"),
    "evaluation/evaluate_model.py": ("evaluate",),
    "utils/load_fsdp_to_hf.py": ("convert",),
    "utils/export_split.py": ("export",),
    "utils/collect_trajectories.py": ("oreo", "collect"),
}
# the Hydra config folder a command reads when it is given no --config-path
DEFAULT_CONFIG_PATH = {("train",): "configs/smoke", ("oreo", "train"): "configs/oreo"}


@functools.cache
def help_text(command: tuple[str, ...]) -> str:
    """What ``rg-verl <command> --help`` prints."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out), contextlib.suppress(SystemExit):
        cli.main([*command, "--help"])
    return out.getvalue()


@functools.cache
def make_targets() -> set[str]:
    return set(re.findall(r"^([\w-]+):", (REPO / "Makefile").read_text(), re.MULTILINE))


def commands(text: str) -> list[tuple[int, list[str]]]:
    """(line number, words) of each shell command in the text's code blocks (bash, sh or unnamed), comments off,
    continuation lines joined, ``&&`` and ``;`` chains split."""
    found, fence, pending, start = [], None, "", 0
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            fence = None if fence is not None else line[3:].strip()
            continue
        if fence not in ("bash", "sh", ""):
            continue
        if not pending:
            start = number
        pending += re.split(r"(?:^|\s)#\s", line, maxsplit=1)[0]
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        try:
            words = shlex.split(pending)
        except ValueError:
            words = []
        pending = ""
        segment: list[str] = []
        for word in [*words, ";"]:
            if word in ("&&", ";", "||", "|"):
                while segment and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", segment[0]):
                    segment.pop(0)  # VAR=value before the command
                if segment:
                    found.append((start, segment))
                segment = []
            else:
                segment.append(word)
    return found


def option_names(args: list[str]) -> list[str]:
    return [arg.split("=", 1)[0] for arg in args if arg.startswith("--") and not PLACEHOLDER.search(arg)]


def value_of(args: list[str], option: str) -> str | None:
    return args[args.index(option) + 1] if option in args and args.index(option) + 1 < len(args) else None


def check_subcommand(command: tuple[str, ...], args: list[str]) -> list[str]:
    """Problems with ``rg-verl <command> args``: unknown options, a config that is not there."""
    problems = [f"rg-verl {' '.join(command)} has no option {name}" for name in option_names(args)
                if name not in re.findall(r"--[\w-]+", help_text(command))]  # fmt: skip
    config = value_of(args, "--config")
    if config and not PLACEHOLDER.search(config) and not (REPO / config).is_file():
        problems.append(f"--config {config}: no such file")
    folder = value_of(args, "--config-path") or DEFAULT_CONFIG_PATH.get(command)
    name = value_of(args, "--config-name")
    if folder and name and not PLACEHOLDER.search(folder + name) and not (REPO / folder / f"{name}.yaml").is_file():
        problems.append(f"--config-path {folder} --config-name {name}: no {folder}/{name}.yaml")
    return problems


def check_script(source: Path, args: list[str]) -> list[str]:
    """Problems with a script or module of ours run with ``args``: options its source never declares."""
    text = source.read_text()
    return [f"{source.relative_to(REPO)} declares no option {name}" for name in option_names(args)
            if f'"{name}"' not in text]  # fmt: skip


def check_python(args: list[str]) -> list[str]:
    if args[:1] == ["-m"]:
        module = args[1]
        spec = importlib.util.find_spec(module)
        if spec is None:
            return [f"python -m {module}: no such module"]
        origin = Path(spec.origin or "")
        return check_script(origin, args[2:]) if REPO in origin.parents and module.split(".")[0] != "pytest" else []
    script, rest = args[0], args[1:]
    if PLACEHOLDER.search(script):
        return []
    if not (REPO / script).is_file():
        return [f"{script}: no such script"]
    if script in SCRIPT_COMMANDS:
        return check_subcommand(SCRIPT_COMMANDS[script], rest)
    return check_script(REPO / script, rest)


def check_command(words: list[str]) -> list[str]:
    program, args = words[0], words[1:]
    if program in ("python", "python3") or program.endswith("/python"):
        return check_python(args) if args else []
    if program == "rg-verl":
        if not args or args[0] not in cli.COMMANDS:
            return [f"rg-verl has no command {args[:1]}"]
        depth = 2 if args[0] == "oreo" and len(args) > 1 and not args[1].startswith("-") else 1
        return check_subcommand(tuple(args[:depth]), args[depth:])
    if program == "torchrun":
        scripts = [arg for arg in args if arg.endswith(".py")]
        return [f"{script}: no such script" for script in scripts if not (REPO / script).is_file()]
    if program == "make":
        return [f"make has no target {target}" for target in args if not target.startswith("-")
                and "=" not in target and target not in make_targets()]  # fmt: skip
    return []


def problems_of(name: str, text: str, folder: Path) -> list[str]:
    """Every broken link, quoted path and command of one page; ``folder`` is where its relative links start."""
    problems = []
    for number, line in enumerate(text.splitlines(), 1):
        for target in LINK.findall(line):
            path = target.split("#", 1)[0]
            if path and not re.match(r"[a-z]+:", path) and not (folder / path).exists():
                problems.append(f"{name}:{number}: the link {target} points at nothing")
        for quoted in QUOTED_PATH.findall(line):
            path = re.sub(r":\d+$", "", quoted)
            exists = (REPO / path).exists() or (REPO / f"{path}.yaml").exists()  # a config may be named bare
            if not PLACEHOLDER.search(path) and not exists:
                problems.append(f"{name}:{number}: `{quoted}` does not exist")
    for number, words in commands(text):
        problems += [f"{name}:{number}: {problem}" for problem in check_command(words)]
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(REPO)))
def test_every_link_path_and_command_of_the_docs_points_at_something_that_exists(page):
    problems = problems_of(str(page.relative_to(REPO)), page.read_text(), page.parent)
    assert not problems, "\n".join(problems)


def test_the_check_finds_each_kind_of_broken_reference():
    """The negative control: one page with one broken reference of each kind."""
    page = """See [the guide](docs/nowhere.md) and `rg_verl/no_such_module.py`.

```bash
python train_grpo.py --config-path configs/inter_generalisation --config-name no_such_config
python utils/no_such_script.py
rg-verl evaluate --config evaluation/configs/smoke.yaml --no-such-option
rg-verl no-such-command
CUDA_VISIBLE_DEVICES=0 python -m bench.no_such_bench
python bench/soak.py --no-such-flag && make no-such-target
```
"""
    problems = problems_of("page.md", page, REPO)
    expected = [
        "the link docs/nowhere.md points at nothing",
        "`rg_verl/no_such_module.py` does not exist",
        "no configs/inter_generalisation/no_such_config.yaml",
        "utils/no_such_script.py: no such script",
        "rg-verl evaluate has no option --no-such-option",
        "rg-verl has no command ['no-such-command']",
        "python -m bench.no_such_bench: no such module",
        "bench/soak.py declares no option --no-such-flag",
        "make has no target no-such-target",
    ]
    assert len(problems) == len(expected), problems
    for problem, text in zip(problems, expected, strict=True):
        assert text in problem


def test_the_commands_of_a_page_are_read_as_the_shell_reads_them():
    page = """```bash
python train_grpo.py --config-path configs/smoke \\
    --config-name learn   # a comment with --not-an-option
```

```yaml
python: --not-a-command
```
"""
    command = ["python", "train_grpo.py", "--config-path", "configs/smoke", "--config-name", "learn"]
    assert commands(page) == [(2, command)]
    assert problems_of("page.md", page, REPO) == []
