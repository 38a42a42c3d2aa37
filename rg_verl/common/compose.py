"""A config composed the way every command composes one: the config folder, its command line, Hydra's compose.

A relative ``--config-path`` is looked up in the working directory, then in the repository root; ``pkg://`` names
a package's config folder. A YAML file that does not parse is one line, ``file:line:column: what is wrong``
(:class:`YamlSyntaxError`), wherever a command reads one, since Hydra would print its loader's traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rg_verl.common.schema import ConfigError

__all__ = [
    "DEFAULT_CONFIG_DIR", "DEFAULT_CONFIG_NAME", "HELP_FLAGS", "YamlSyntaxError", "check_yaml", "compose",
    "compose_command", "config_parser", "exit_on_yaml_error", "hydra_argv", "parse_command", "preflight", "repo_root",
    "resolve_config_dir", "run_hydra", "yaml_config", "yaml_error",
]  # fmt: skip

DEFAULT_CONFIG_DIR = Path("configs") / "smoke"  # the CPU smoke run
DEFAULT_CONFIG_NAME = "cpu"
HELP_FLAGS = ("--help", "-h", "--hydra-help", "--info", "-i")


class YamlSyntaxError(ConfigError):
    """A YAML file that does not parse; its message is one line, ``file:line:column: what is wrong``."""


def yaml_error(error: yaml.YAMLError, path: str | os.PathLike | None = None) -> YamlSyntaxError:
    """``error`` as one line: file (yaml's mark, else ``path``), line and column from 1, the problem and its context.

    >>> try:
    ...     yaml.safe_load("a: [1, 2\\nb: 3\\n")
    ... except yaml.YAMLError as error:
    ...     print(yaml_error(error, "x.yaml"))
    x.yaml:2:2: expected ',' or ']', but got ':' (while parsing a flow sequence that began at 1:4)
    """
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    name = getattr(mark, "name", None) or getattr(error, "name", None)
    if not name or name.startswith("<"):  # yaml's "<unicode string>" or "<file>": the caller knows the file
        name = str(path) if path is not None else name or "<yaml>"
    problem = getattr(error, "problem", None) or getattr(error, "reason", None)
    text = " ".join(str(problem if problem else error).split())
    context, began = getattr(error, "context", None), getattr(error, "context_mark", None)
    if context and began is not None and began is not mark:
        text += f" ({context} that began at {began.line + 1}:{began.column + 1})"
    elif context:
        text += f" ({context})"
    where = f"{name}:{mark.line + 1}:{mark.column + 1}" if mark is not None else name
    return YamlSyntaxError(f"{where}: {text}")


def repo_root() -> Path:
    """The folder that holds the ``rg_verl`` package (the repository root of an editable install)."""
    return Path(__file__).resolve().parents[2]


def config_parser(prog: str, description: str, epilog: str | None = None, config_dir: Path = DEFAULT_CONFIG_DIR,
                  config_name: str = DEFAULT_CONFIG_NAME) -> argparse.ArgumentParser:  # fmt: skip
    """``--config-path``, ``--config-name`` and Hydra's ``--cfg``; ``key=value`` overrides are left to the caller."""
    parser = argparse.ArgumentParser(
        prog=prog, usage=f"{prog} [--config-path DIR] [--config-name NAME] [key=value ...]", description=description,
        epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False,
    )  # fmt: skip
    parser.add_argument(
        "--config-path", "-cp", metavar="DIR",
        help="folder of the experiment config: relative to the working directory (then to the repository root), "
        f"absolute, or pkg://... (default: the repository's {config_dir.as_posix()})",
    )  # fmt: skip
    parser.add_argument("--config-name", "-cn", metavar="NAME", default=config_name,
                        help=f"config file name in that folder, without .yaml (default: {config_name})")  # fmt: skip
    # declared here because its short form -c would otherwise read as an abbreviation of -cp/-cn
    parser.add_argument("--cfg", "-c", choices=("job", "hydra", "all"), help="print Hydra's config and exit")
    parser.set_defaults(default_config_dir=config_dir)
    return parser


def parse_command(
    parser: argparse.ArgumentParser, argv: Sequence[str], required: Sequence[str] = ()
) -> tuple[argparse.Namespace, list[str]]:
    """The options of ``argv`` (the config folder resolved as ``args.config_dir``) and its ``key=value`` overrides.

    An unknown option, a missing ``required`` one (unless ``--cfg``) or a config folder not found exits with 2.
    """
    args, overrides = parser.parse_known_args(list(argv))
    unknown = [arg for arg in overrides if arg.startswith("-")]
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    missing = [f"--{name.replace('_', '-')}" for name in required if getattr(args, name) is None]
    if missing and getattr(args, "cfg", None) is None:
        parser.error(f"the following arguments are required: {', '.join(missing)}")
    if hasattr(args, "default_config_dir"):
        args.config_dir = _config_dir(parser, args)
    return args, overrides


def _config_dir(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    """The config folder of a :func:`config_parser` command line; one that is not found is a usage error (exits)."""
    try:
        return resolve_config_dir(args.config_path, default=args.default_config_dir)
    except FileNotFoundError as error:
        parser.error(str(error))


def compose_command(args: argparse.Namespace, overrides: Sequence[str]) -> Any | None:
    """The config of a :func:`parse_command` result; ``None`` once Hydra's ``--cfg`` has printed it instead."""
    config = compose(args.config_dir, args.config_name, overrides, hydra_config=args.cfg in ("hydra", "all"))
    if not args.cfg:
        return config
    print(OmegaConf.to_yaml(config.hydra if args.cfg == "hydra" else config))
    return None


def hydra_argv(parser: argparse.ArgumentParser, argv: Sequence[str], job_name: str) -> list[str]:
    """Hydra's command line for ``argv``: the config folder made absolute, the rest in order, the job ``job_name``.

    Hydra would resolve a relative folder against the file that declares ``@hydra.main``; a missing one exits.
    """
    args, rest = parser.parse_known_args(list(argv))
    config_dir = _config_dir(parser, args)
    named = any(arg.split("=", 1)[0] == "hydra.job.name" for arg in rest)
    cfg = ["--cfg", args.cfg] if args.cfg else []
    return ["--config-path", config_dir, "--config-name", args.config_name, *cfg, *rest] + (
        [] if named else [f"hydra.job.name={job_name}"]
    )


def run_hydra(task: Callable[[Any], Any], prog: str, argv: Sequence[str]) -> int:
    """Runs ``task`` as ``@hydra.main`` does, on :func:`hydra_argv`'s command line ``argv``; returns 0."""
    import hydra

    saved = sys.argv
    sys.argv = [prog, *argv]  # hydra.main reads its arguments from sys.argv
    try:
        hydra.main(config_path=None, config_name=None, version_base=None)(task)()  # argv names the config
    finally:
        sys.argv = saved
    return 0


def check_yaml(hydra_args: Sequence[str]) -> None:
    """Compose :func:`hydra_argv`'s config once, raising :class:`YamlSyntaxError`; other failures are Hydra's."""
    if any(arg in HELP_FLAGS for arg in hydra_args):
        return
    overrides = [arg for arg in hydra_args[4:] if "=" in arg and not arg.startswith("-")]
    try:
        compose(hydra_args[1], hydra_args[3], overrides)
    except YamlSyntaxError:
        raise
    except Exception:  # noqa: BLE001 - everything else is Hydra's to report, as it does when the task starts
        return


def exit_on_yaml_error(hydra_args: Sequence[str]) -> None:
    """:func:`check_yaml`, exiting with status 1 and its one line on a YAML syntax error."""
    try:
        check_yaml(hydra_args)
    except YamlSyntaxError as error:
        sys.exit(str(error))


def preflight(parser: argparse.ArgumentParser, argv: Sequence[str], job_name: str) -> list[str] | None:
    """Hydra's command line for ``argv`` once its YAML files parse (:func:`exit_on_yaml_error`); None on a usage error.

    For a script whose ``@hydra.main`` reads ``argv`` itself, so Hydra reports the usage error too.
    """
    try:
        args = hydra_argv(parser, argv, job_name)
    except SystemExit:
        return None
    exit_on_yaml_error(args)
    return args


def resolve_config_dir(
    config_path: str | None, cwd: Path | None = None, root: Path | None = None, default: Path = DEFAULT_CONFIG_DIR
) -> str:
    """The absolute (or ``pkg://``) config folder; ``default`` in the repository for None; FileNotFoundError if none."""
    cwd = Path.cwd() if cwd is None else cwd
    root = repo_root() if root is None else root
    if config_path is None:
        default = root / default
        if not default.is_dir():
            raise FileNotFoundError(
                f"the default config folder {default} does not exist (rg_verl is not installed from a checkout "
                "of the repository); pass --config-path DIR --config-name NAME"
            )
        return str(default)
    if config_path.startswith("pkg://"):
        return config_path
    path = Path(config_path).expanduser()
    candidates = [path] if path.is_absolute() else [cwd / path, root / path]
    for candidate in candidates:
        if candidate.is_dir():
            return str(candidate.resolve())
    looked = " or ".join(str(c) for c in dict.fromkeys(candidates))
    raise FileNotFoundError(f"config folder {config_path!r} not found (looked for {looked})")


def compose(
    config_dir: str, config_name: str, overrides: Sequence[str], hydra_config: bool = False, job_name: str = "app"
) -> Any:
    """``config_name`` of ``config_dir`` (a folder or ``pkg://``) with ``overrides`` (:class:`YamlSyntaxError`)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir, initialize_config_module

    if config_dir.startswith("pkg://"):
        module = config_dir.removeprefix("pkg://").replace("/", ".")
        context = initialize_config_module(module, job_name=job_name, version_base=None)
    else:
        context = initialize_config_dir(config_dir=config_dir, job_name=job_name, version_base=None)
    with context:
        try:
            return hydra_compose(config_name=config_name, overrides=list(overrides), return_hydra_config=hydra_config)
        except yaml.YAMLError as error:
            raise yaml_error(error) from None


def yaml_config(path: Path, overrides: Sequence[str] = ()) -> Any:
    """The YAML file with ``key=value`` ``overrides`` set, resolved, as plain dicts and lists (:class:`ConfigError`).

    A key is dotted and may index a list (``categories.0.datasets.0.size=3``); a value is read as OmegaConf's dotlist
    reads one (``names=[x,y]``, ``lr=1e-3``, ``value_model=null``).
    """
    try:
        config = OmegaConf.load(path)
    except yaml.YAMLError as error:
        raise yaml_error(error, path) from None
    except (OmegaConfBaseException, ValueError) as error:
        raise ConfigError(f"{path}: cannot read the config: {error}") from None
    for override in overrides:
        key, equals, value = override.partition("=")
        if not equals or not key.strip():
            raise ConfigError(f"{override!r}: an override is key=value, e.g. max_tokens=256 or decoding.beam_width=3")
        try:  # OmegaConf.update can index a list on the way
            OmegaConf.update(config, key.strip(), OmegaConf.from_dotlist([f"value={value}"])["value"], merge=True)
        except (OmegaConfBaseException, ValueError, yaml.YAMLError) as error:
            raise ConfigError(f"{override!r}: cannot set it in {path}: {error}") from None
    try:
        return OmegaConf.to_container(config, resolve=True)
    except (OmegaConfBaseException, ValueError) as error:  # a failed interpolation
        raise ConfigError(f"{path}: cannot read the config: {error}") from None
