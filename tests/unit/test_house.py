"""The shape of the house: small modules and functions, one folder per concern, shared names spelled once.

The sizes are guidance, not rules: a module is cut by concern, not to fit a count, so a long module or function
is a warning in the test report (a hint to look for a second concern in it), never a failure.
"""

import ast
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import tomllib

from tests.helpers import REPO

# past these sizes the report warns
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
CODE_DIRS = ("rg_verl", "bench", "utils")


def _sources(*dirs: str) -> list:
    return sorted(p for d in dirs for p in (REPO / d).rglob("*.py"))


def _long_functions(path, root=REPO) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return [
        f"{path.relative_to(root)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]


def test_long_functions_are_reported():
    offenders = [entry for path in _sources(*CODE_DIRS) for entry in _long_functions(path)]
    if offenders:
        warnings.warn("long functions (does one hold two concerns?):\n" + "\n".join(offenders), stacklevel=1)


def test_long_modules_are_reported():
    sizes = {p.relative_to(REPO): len(p.read_text().splitlines()) for p in _sources("rg_verl")}
    offenders = {str(path): n for path, n in sizes.items() if n > MAX_MODULE_LINES}
    if offenders:
        warnings.warn(f"long modules (does one hold two concerns?): {offenders}", stacklevel=1)


def _exception_classes(path, root=REPO) -> dict[str, str]:
    """name -> where, for each class in ``path`` that derives from a class whose name ends in Error or Exception."""
    found = {}
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        bases = [ast.unparse(base).rsplit(".", 1)[-1] for base in getattr(node, "bases", [])]
        if isinstance(node, ast.ClassDef) and any(base.endswith(("Error", "Exception")) for base in bases):
            found[node.name] = f"{path.relative_to(root)}:{node.lineno}"
    return found


def test_no_two_exception_classes_share_a_name():
    seen: dict[str, list[str]] = {}
    for path in _sources(*CODE_DIRS):
        for name, where in _exception_classes(path).items():
            seen.setdefault(name, []).append(where)
    shared = {name: places for name, places in seen.items() if len(places) > 1}
    assert not shared, f"one name, two errors (an except clause catches the one it imported): {shared}"


def test_the_exception_check_sees_a_subclass(tmp_path):
    (tmp_path / "m.py").write_text("class ResumeError(errors.CheckpointError):\n    pass\n")
    assert _exception_classes(tmp_path / "m.py", tmp_path) == {"ResumeError": "m.py:1"}


def test_a_long_module_is_a_warning_not_a_failure(monkeypatch):
    import tests.unit.test_house as house

    monkeypatch.setattr(house, "MAX_MODULE_LINES", 1)
    with pytest.warns(UserWarning, match="long modules"):
        house.test_long_modules_are_reported()


def test_the_long_function_check_sees_a_long_function(tmp_path):
    """The negative control of the size checks: a 61-line function is reported."""
    path = tmp_path / "probe.py"
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    path.write_text(f"def short():\n    pass\n\n\ndef long():\n{body}")
    assert _long_functions(path, root=tmp_path) == [f"probe.py:5 long ({MAX_FUNCTION_LINES + 1} lines)"]


@pytest.mark.parametrize(
    "folder",
    ["common", "data", "reward", "grpo", "cpu", "hf_rollout", "evaluation", "checkpoint", "migrate", "search", "oreo"],
)
def test_each_concern_has_its_folder_with_a_docstring(folder):
    init = REPO / "rg_verl" / folder / "__init__.py"
    assert ast.get_docstring(ast.parse(init.read_text())), f"rg_verl/{folder}/__init__.py says what the folder holds"


# names rg_verl.common.names owns: no other package module may assign them
SHARED = re.compile(
    r"^(SPLITS|SPLIT_URI|EVAL_SPLIT|SPLIT_STRIDE|MAX_SEED|RG_PREFIX|FILE_PREFIX|DATA_SOURCE_PREFIX|MODES|"
    r"PEFT_PREFIX|_PEFT_PREFIX|Messages|THINK_OPEN|THINK_CLOSE|ANSWER_OPEN|ANSWER_CLOSE)\s*[:=]",
    re.M,
)


def test_shared_names_are_spelled_only_in_common_names():
    offenders = [
        f"{p.relative_to(REPO)}: {m.group(1)}"
        for p in _sources("rg_verl")
        if p.relative_to(REPO).as_posix() != "rg_verl/common/names.py"
        for m in SHARED.finditer(p.read_text())
    ]
    assert not offenders, "import these from rg_verl.common.names instead:\n" + "\n".join(offenders)


def _string_literals(path) -> list[str]:
    """The string constants of a module (f-string parts included), docstrings left out."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


# markup that rg_verl.common.names spells: the response tags and the split URI
NAMES_TEXT = ("<think>", "</think>", "<answer>", "</answer>", "reasoning_gym://")


def test_tags_and_split_uris_are_spelled_only_in_common_names():
    offenders = [
        f"{p.relative_to(REPO)}: {literal[:60]!r}"
        for p in _sources("rg_verl")
        if p.relative_to(REPO).as_posix() != "rg_verl/common/names.py"
        for literal in _string_literals(p)
        if literal.lstrip().startswith(NAMES_TEXT)  # markup, not prose that mentions a tag
    ]
    assert not offenders, "use rg_verl.common.names's constants:\n" + "\n".join(offenders)


def test_the_names_check_sees_an_f_string(tmp_path):
    """The negative control: a tag inside an f-string is found, one in a docstring is not."""
    path = tmp_path / "probe.py"
    path.write_text('"""Says <answer> in prose."""\nx = 3\ny = f"<answer>{x}</answer>"\n')
    assert [lit for lit in _string_literals(path) if "<answer>" in lit] == ["<answer>"]


def _readme_layout() -> set[str]:
    """The paths of the layout tree in docs/layout.md (two spaces of indent per folder level)."""
    text = (REPO / "docs" / "layout.md").read_text()
    block = text.split("# Layout", 1)[1].split("```", 2)[1]
    paths, stack = set(), []
    for line in block.splitlines():
        if not line.strip():
            continue
        depth = (len(line) - len(line.lstrip(" "))) // 2
        name = line.split()[0]
        stack[depth:] = [name]
        paths.add("".join(stack).rstrip("/"))
    return paths


def test_readme_layout_names_every_module_and_nothing_stale():
    listed = _readme_layout()
    stale = sorted(p for p in listed if not (REPO / p).exists())
    assert not stale, f"docs/layout.md names paths that do not exist: {stale}"
    modules = {str(p.relative_to(REPO)) for p in _sources("rg_verl") if p.name != "__init__.py"}
    folders = {str(p.parent.relative_to(REPO)) for p in _sources("rg_verl")}
    missing = sorted((modules | folders) - listed)
    assert not missing, f"add these to the layout in docs/layout.md: {missing}"


# test files about something other than one package module or folder: the path each one tests, which must exist
NOT_A_MODULE = {
    "test_house.py": "rg_verl",  # the shape of the whole package
    "test_shipped_configs.py": "configs",  # every shipped config
    "reward/test_oracle.py": "rg_verl/reward",  # the whole reward pipeline, on every reasoning-gym dataset
    "evaluation/test_lmeh.py": "evaluation/lmeh",  # the lm-evaluation-harness tasks
    "test_reasoning_rl_recipe.py": "configs/math/_reasoning_rl.yaml",  # Reasoning-RL's published GSM8K recipe
    "test_reference_experiments.py": "configs",  # the shipped experiments against reasoning-gym's own
    "test_docs.py": "docs",  # the links and commands of the README and docs/
}


def _names_a_module(folder, name: str, packages: bool) -> bool:
    """Whether ``name`` is ``<module>`` or ``<module>_<topic>`` of a module (or, with ``packages``, a
    subpackage) in ``folder``."""
    words = name.split("_")
    for stem in ("_".join(words[:n]) for n in range(len(words), 0, -1)):
        if (folder / f"{stem}.py").is_file() and stem != "__init__":
            return True
        if packages and (folder / stem / "__init__.py").is_file():
            return True
    return False


def _missing_tests(package, tests) -> list[str]:
    """Top-level modules without ``tests/unit/test_<module>.py``, folders without a test in ``tests/unit/<folder>/``."""
    problems = [
        f"rg_verl/{module.name} has no tests/unit/test_{module.name}"
        for module in sorted(package.glob("*.py"))
        if module.name != "__init__.py" and not (tests / f"test_{module.name}").is_file()
    ]
    for folder in sorted(p for p in package.iterdir() if p.is_dir()):
        has_code = any(p.name != "__init__.py" for p in folder.glob("*.py"))  # conf/ holds YAML only
        if has_code and not any((tests / folder.name).glob("test_*.py")):
            problems.append(f"rg_verl/{folder.name}/ has no tests in tests/unit/{folder.name}/")
    return problems


def _stale_tests(root, package, tests, about) -> list[str]:
    """Test folders and files that name no folder or module of the package (nor a path listed in ``about``)."""
    problems = [
        f"tests/unit/{folder.relative_to(tests)}/ mirrors no folder of rg_verl"
        for folder in sorted(p for p in tests.rglob("*") if p.is_dir() and p.name != "__pycache__")
        if not (package / folder.relative_to(tests)).is_dir()
    ]
    for path in sorted(tests.rglob("test_*.py")):
        rel, folder = path.relative_to(tests).as_posix(), package / path.parent.relative_to(tests)
        name, nested = path.stem.removeprefix("test_"), folder != package
        if rel in about:
            if not (root / about[rel]).exists():
                problems.append(f"tests/unit/{rel} tests {about[rel]}, which does not exist")
        elif folder.is_dir() and not (nested and name == folder.name) and not _names_a_module(folder, name, nested):
            problems.append(f"tests/unit/{rel} names no module of {folder.relative_to(root).as_posix()}/")
    return problems


def _mirror_problems(root, about=NOT_A_MODULE) -> list[str]:
    """What breaks "tests mirror the package" in the repository at ``root``: tests missing, or stale."""
    package, tests = root / "rg_verl", root / "tests" / "unit"
    return _missing_tests(package, tests) + _stale_tests(root, package, tests, about)


def test_tests_mirror_the_package():
    problems = _mirror_problems(REPO)
    rule = (
        "tests/unit/<folder>/ holds the tests of rg_verl/<folder>/, tests/unit/test_<module>.py of rg_verl/<module>.py"
    )
    assert not problems, f"{rule}:\n" + "\n".join(problems)


def test_the_mirror_check_sees_missing_and_stale_tests(tmp_path):
    """The negative control: a fake repository with every kind of mismatch, and the kinds that are fine."""
    files = [
        "rg_verl/__init__.py",
        "rg_verl/tested.py",
        "rg_verl/untested.py",
        "rg_verl/data/__init__.py",
        "rg_verl/data/files.py",
        "rg_verl/data/sub/__init__.py",
        "rg_verl/grpo/__init__.py",
        "rg_verl/grpo/trainer.py",
        "rg_verl/conf/__init__.py",  # no module but __init__: no tests needed
        "tests/unit/__init__.py",
        "tests/unit/test_tested.py",
        "tests/unit/test_tested_docs.py",
        "tests/unit/test_gone.py",
        "tests/unit/test_data.py",
        "tests/unit/test_about.py",
        "tests/unit/test_lost.py",
        "tests/unit/data/test_data.py",
        "tests/unit/data/test_files.py",
        "tests/unit/data/test_files_more.py",
        "tests/unit/data/test_sub.py",
        "tests/unit/data/test_nothing.py",
        "tests/unit/data/helpers.py",
        "tests/unit/old/__init__.py",
        "tests/unit/old/test_x.py",
        "tests/unit/grpo/__init__.py",  # a folder with no test file
        "docs/about.md",
    ]
    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    about = {"test_about.py": "docs/about.md", "test_lost.py": "docs/lost.md"}
    assert _mirror_problems(tmp_path, about) == [
        "rg_verl/untested.py has no tests/unit/test_untested.py",
        "rg_verl/grpo/ has no tests in tests/unit/grpo/",
        "tests/unit/old/ mirrors no folder of rg_verl",
        "tests/unit/data/test_nothing.py names no module of rg_verl/data/",
        "tests/unit/test_data.py names no module of rg_verl/",  # a folder's tests belong in its folder
        "tests/unit/test_gone.py names no module of rg_verl/",
        "tests/unit/test_lost.py tests docs/lost.md, which does not exist",
    ]


# ---- the layers: pyproject.toml's import-linter contract, which make test checks with lint-imports first

LINT_IMPORTS = [str(Path(sys.executable).with_name("lint-imports")), "--no-cache"]


def _layers() -> list[set[str]]:
    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    [layers] = [c["layers"] for c in contracts if c["type"] == "layers"]
    return [{room.strip() for room in layer.split("|")} for layer in layers]


def test_the_layers_name_every_room_once():
    package = REPO / "rg_verl"
    rooms = {f"rg_verl.{p.stem}" for p in package.glob("*.py") if p.name != "__init__.py"}
    rooms |= {f"rg_verl.{p.parent.name}" for p in package.glob("*/__init__.py")}
    named = [room for layer in _layers() for room in layer]
    assert sorted(named) == sorted(rooms - {"rg_verl.conf"})  # conf/ holds YAML only


def _lint_imports(root: Path) -> subprocess.CompletedProcess:
    command = [*LINT_IMPORTS, "--config", str(root / "pyproject.toml")]
    env = {"PYTHONPATH": str(root), "PATH": ""}  # the package at root, not the installed one
    return subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=300)


def test_an_import_that_points_up_breaks_the_layers(tmp_path):
    """The negative control: the package with one upward import (common imports grpo, lazily) fails."""
    shutil.copytree(REPO / "rg_verl", tmp_path / "rg_verl", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    names = tmp_path / "rg_verl" / "common" / "names.py"
    names.write_text(names.read_text() + "\n\ndef _upward():\n    from rg_verl.grpo import launch\n")
    proc = _lint_imports(tmp_path)
    assert proc.returncode == 1 and "BROKEN" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "rg_verl.common.names -> rg_verl.grpo.launch" in proc.stdout
