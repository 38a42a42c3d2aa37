"""A config composed the way every command composes one: the config folder, the parser of its command line, and
Hydra's compose. GRPO's and OREO's launchers, the export, OREO's collection and the comparison all use it. The
commands that read one YAML file (the evaluator, the comparison) take the same ``key=value`` overrides of it
(:func:`yaml_config`).

A relative ``--config-path`` is looked up in the working directory, then in the repository root; a ``pkg://``
path is a package's config folder (``pkg://rg_verl.conf``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rg_verl.common.schema import ConfigError

__all__ = [
    "DEFAULT_CONFIG_DIR", "DEFAULT_CONFIG_NAME", "compose", "compose_command", "config_parser", "hydra_argv",
    "parse_command", "repo_root", "resolve_config_dir", "run_hydra", "yaml_config",
]  # fmt: skip

# the train command's config when none is named: the CPU smoke run
DEFAULT_CONFIG_DIR = Path("configs") / "smoke"
DEFAULT_CONFIG_NAME = "cpu"


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
    job is named ``job_name`` (Hydra's default, ``app``, unless a command names its own)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir, initialize_config_module

    if config_dir.startswith("pkg://"):
        module = config_dir.removeprefix("pkg://").replace("/", ".")
        context = initialize_config_module(module, job_name=job_name, version_base=None)
    else:
        context = initialize_config_dir(config_dir=config_dir, job_name=job_name, version_base=None)
    with context:
        return hydra_compose(config_name=config_name, overrides=list(overrides), return_hydra_config=hydra_config)


def yaml_config(path: Path, overrides: Sequence[str] = ()) -> Any:
    """The YAML file at ``path`` with ``key=value`` ``overrides`` set in it, interpolations resolved, as plain dicts
    and lists. A key is dotted and may index a list (``decoding.beam_width=3``, ``categories.0.datasets.0.size=3``); a
    value is read as YAML, as Hydra and OmegaConf read one (``names=[x,y]``, ``lr=1e-3``, ``value_model=null``).

    Raises:
        ConfigError: naming the override that is not ``key=value`` or cannot be set, or the file that cannot be read.
    """
    try:
        config = OmegaConf.load(path)
    except (OmegaConfBaseException, ValueError, yaml.YAMLError) as error:
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
