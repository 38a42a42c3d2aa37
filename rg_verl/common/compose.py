"""A config composed the way every command composes one: the config folder, the parser of its command line, and
Hydra's compose. GRPO's and OREO's launchers, the export, OREO's collection and the comparison all use it. The
commands that read one YAML file (the evaluator, the comparison) take the same ``key=value`` overrides of it
(:func:`yaml_config`).

A relative ``--config-path`` is looked up in the working directory, then in the repository root; a ``pkg://``
path is a package's config folder (``pkg://rg_verl.conf``).

A YAML file that does not parse, the primary config or one its defaults list loads, is one line,
``file:line:column: what is wrong`` (:class:`YamlSyntaxError`), wherever a command reads one: :func:`compose`,
:func:`yaml_config`, and before Hydra starts a ``@hydra.main`` task (:func:`check_yaml`, which :func:`preflight`
runs), since Hydra would print a traceback of its loader instead.
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

# the train command's config when none is named: the CPU smoke run
DEFAULT_CONFIG_DIR = Path("configs") / "smoke"
DEFAULT_CONFIG_NAME = "cpu"
# the options that ask Hydra for help instead of a run
HELP_FLAGS = ("--help", "-h", "--hydra-help", "--info", "-i")


class YamlSyntaxError(ConfigError):
    """A YAML file that does not parse; its message is one line, ``file:line:column: what is wrong``."""


def yaml_error(error: yaml.YAMLError, path: str | os.PathLike | None = None) -> YamlSyntaxError:
    """``error`` as one line: the file (yaml's mark names it; else ``path``), the line and column of the problem,
    counted from 1, and yaml's problem, with what it was parsing and where that began.

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


def config_parser(
    prog: str,
    description: str,
    epilog: str | None = None,
    config_dir: Path = DEFAULT_CONFIG_DIR,
    config_name: str = DEFAULT_CONFIG_NAME,
) -> argparse.ArgumentParser:
    """The parser of a command that composes a config: ``--config-path`` (default ``config_dir``), ``--config-name``
    (default ``config_name``) and Hydra's ``--cfg``; everything else (``key=value`` overrides) is left to the caller
    (:func:`parse_command`, or Hydra through :func:`hydra_argv`)."""
    parser = argparse.ArgumentParser(
        prog=prog,
        usage=f"{prog} [--config-path DIR] [--config-name NAME] [key=value ...]",
        description=description,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    parser.add_argument(
        "--config-path",
        "-cp",
        metavar="DIR",
        help="folder of the experiment config: relative to the working directory (then to the repository root), "
        f"absolute, or pkg://... (default: the repository's {config_dir.as_posix()})",
    )
    parser.add_argument(
        "--config-name",
        "-cn",
        metavar="NAME",
        default=config_name,
        help=f"config file name in that folder, without .yaml (default: {config_name})",
    )
    # Hydra's --cfg, declared here because its short form -c would otherwise read as an abbreviation of -cp/-cn
    parser.add_argument("--cfg", "-c", choices=("job", "hydra", "all"), help="print Hydra's config and exit")
    parser.set_defaults(default_config_dir=config_dir)
    return parser


def parse_command(
    parser: argparse.ArgumentParser, argv: Sequence[str], required: Sequence[str] = ()
) -> tuple[argparse.Namespace, list[str]]:
    """The options of ``argv`` and its ``key=value`` overrides; for a :func:`config_parser` command, the config
    folder resolved as ``args.config_dir``. An unknown option, a ``required`` one missing (unless ``--cfg`` only asks
    to print the config) or a config folder not found is a usage error: argparse exits with 2."""
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
    """The config of a :func:`config_parser` command line (:func:`parse_command`'s); ``None`` once Hydra's ``--cfg``
    has printed it instead.

    Raises:
        hydra.errors.HydraException: If Hydra cannot compose the config.
    """
    config = compose(args.config_dir, args.config_name, overrides, hydra_config=args.cfg in ("hydra", "all"))
    if not args.cfg:
        return config
    print(OmegaConf.to_yaml(config.hydra if args.cfg == "hydra" else config))
    return None


def hydra_argv(parser: argparse.ArgumentParser, argv: Sequence[str], job_name: str) -> list[str]:
    """Hydra's command line for a :func:`config_parser` command's ``argv``: the config folder made absolute (Hydra
    resolves a relative one against the file that declares ``@hydra.main``), everything else in order, and the job
    named ``job_name`` unless ``argv`` names it. A config folder that does not exist is a usage error (exits)."""
    args, rest = parser.parse_known_args(list(argv))
    config_dir = _config_dir(parser, args)
    named = any(arg.split("=", 1)[0] == "hydra.job.name" for arg in rest)
    cfg = ["--cfg", args.cfg] if args.cfg else []
    return ["--config-path", config_dir, "--config-name", args.config_name, *cfg, *rest] + (
        [] if named else [f"hydra.job.name={job_name}"]
    )


def run_hydra(task: Callable[[Any], Any], prog: str, argv: Sequence[str]) -> int:
    """Runs ``task`` as ``@hydra.main`` runs a function, on the command line ``argv`` (:func:`hydra_argv`'s). Returns
    0; Hydra's errors exit as they do under ``@hydra.main``."""
    import hydra

    saved = sys.argv
    sys.argv = [prog, *argv]  # hydra.main reads its arguments from sys.argv
    try:
        hydra.main(config_path=None, config_name=None, version_base=None)(task)()  # argv names the config
    finally:
        sys.argv = saved
    return 0


def check_yaml(hydra_args: Sequence[str]) -> None:
    """Composes the config of Hydra's command line ``hydra_args`` (:func:`hydra_argv`'s) once, with its ``key=value``
    overrides, as Hydra is about to: a file it loads (the primary config, those of its defaults list) that is not
    valid YAML raises :class:`YamlSyntaxError`. Any other failure, and a help request, is left to Hydra.
    """
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
    """For a script whose ``@hydra.main`` reads ``argv`` itself: Hydra's command line for it (:func:`hydra_argv`),
    once :func:`exit_on_yaml_error` found its YAML files parse; None where ``argv`` is a usage error (argparse has
    said so), which Hydra then reports too."""
    try:
        args = hydra_argv(parser, argv, job_name)
    except SystemExit:
        return None
    exit_on_yaml_error(args)
    return args


def resolve_config_dir(
    config_path: str | None, cwd: Path | None = None, root: Path | None = None, default: Path = DEFAULT_CONFIG_DIR
) -> str:
    """The config folder Hydra should search, as an absolute path (or a ``pkg://`` one); ``default`` (in the
    repository) when ``config_path`` is ``None``.

    Raises:
        FileNotFoundError: If the folder does not exist; the message says where it was looked for.
    """
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
    """The config ``config_name`` of ``config_dir`` (a folder or ``pkg://``), composed with ``overrides``; Hydra's
    job is named ``job_name`` (Hydra's default, ``app``, unless a command names its own).

    Raises:
        YamlSyntaxError: If a file it loads does not parse.
    """
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
    """The YAML file at ``path`` with ``key=value`` ``overrides`` set in it, interpolations resolved, as plain dicts
    and lists. A key is dotted and may index a list (``decoding.beam_width=3``, ``categories.0.datasets.0.size=3``); a
    value is read as YAML, as Hydra and OmegaConf read one (``names=[x,y]``, ``lr=1e-3``, ``value_model=null``).

    Raises:
        ConfigError: naming the override that is not ``key=value`` or cannot be set, or the file that cannot be read
            (a :class:`YamlSyntaxError` where it does not parse).
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
        try:  # the value as OmegaConf's dotlist reads one (1e-3 a float, [a,b] a list), set at a path update can index
            OmegaConf.update(config, key.strip(), OmegaConf.from_dotlist([f"value={value}"])["value"], merge=True)
        except (OmegaConfBaseException, ValueError, yaml.YAMLError) as error:
            raise ConfigError(f"{override!r}: cannot set it in {path}: {error}") from None
    try:
        return OmegaConf.to_container(config, resolve=True)
    except (OmegaConfBaseException, ValueError) as error:  # a failed interpolation
        raise ConfigError(f"{path}: cannot read the config: {error}") from None
