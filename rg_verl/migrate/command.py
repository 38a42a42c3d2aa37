"""What ``rg-verl migrate-config`` does: a config of reasoning-gym's own training scripts becomes ours."""

from __future__ import annotations

import functools
import importlib.util
import os
import tempfile
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rg_verl import guards
from rg_verl.common.atomic import write_atomic
from rg_verl.common.schema import ConfigError
from rg_verl.migrate import reference, verl_layout
from rg_verl.migrate.tree import MISSING, Migration, Unmapped, container, differences, flatten, merge, put

__all__ = [
    "COMMAND", "DEFAULTS", "default_config", "migrate", "reference_schema_keys", "refuse_reference_schema",
    "render", "write_config",
]  # fmt: skip

COMMAND = "rg-verl migrate-config"
# our Hydra defaults, as the shipped experiment configs list them
DEFAULTS = ["ppo_trainer", "rg_verl_base", "grpo_3b", "_self_"]
SEARCHPATH = ["pkg://verl.trainer.config", "pkg://rg_verl.conf"]


def reference_schema_keys(config: Any) -> list[str]:
    """The keys of ``config`` (a mapping or an OmegaConf config) that only the reference's schema has."""
    config = container(config)
    if not isinstance(config, Mapping):
        return []
    found = []
    section = config.get("reasoning_gym")
    if isinstance(section, Mapping):
        found += [f"reasoning_gym.{key}" for key in ("dataset_size", "developer_prompt") if key in section]
    if "curriculum" in config:
        found.append("curriculum")
    reward = config.get("reward")
    if isinstance(reward, Mapping):
        found += [f"reward.{key}" for key in ("secondary_rewards", "use_accuracy") if key in reward]
    return found


def refuse_reference_schema(config: Any) -> None:
    """Raise :class:`ConfigError` for a config in the reference's schema, naming the command that converts it."""
    keys = reference_schema_keys(config)
    if keys:
        raise ConfigError(
            f"{', '.join(keys)}: this is a config of reasoning-gym's own training scripts, not an rg-verl config; "
            f"convert it with `{COMMAND} OLD.yaml -o NEW.yaml`, then train on NEW.yaml"
        )


@functools.lru_cache(maxsize=1)
def _composed_defaults() -> dict:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    # verl's config folder by its file path: pkg:// would import verl (and torch) only to find it
    verl = importlib.util.find_spec("verl")
    folders = [f"file://{Path(verl.submodule_search_locations[0]) / 'trainer' / 'config'}", *SEARCHPATH[1:]]
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "defaults.yaml").write_text(f"hydra:\n  searchpath: {folders}\ndefaults: {DEFAULTS}\n")
        with initialize_config_dir(config_dir=folder, version_base=None):
            config = compose(config_name="defaults")
    return OmegaConf.to_container(config, resolve=False)


def default_config() -> dict:
    """Our defaults composed (verl's ``ppo_trainer``, ``rg_verl_base``, ``grpo_3b``), interpolations unresolved."""
    return merge({}, _composed_defaults())


def migrate(old: Any) -> tuple[dict, Unmapped]:
    """A reference-schema config as an rg-verl config, and the keys it could not carry over."""
    old = container(old)
    if not isinstance(old, Mapping):
        raise ConfigError(f"the old config is a {type(old).__name__}, not a mapping of sections")
    defaults = _composed_defaults()
    m = Migration(verl_layout.as_run(old), defaults, written=set(flatten(old)))
    verl_layout.hydra(m)
    mix = reference.curriculum(m)
    reference.reasoning_gym(m, mix)
    reference.reward(m)
    verl_layout.verl(m)
    desired: dict = {}
    for path, value in m.desired.items():
        put(desired, path, value)
    _fit_micro_batches(m, defaults, desired)
    hydra = desired.pop("hydra", {})
    new = {"hydra": {**hydra, "searchpath": list(SEARCHPATH)}, "defaults": list(DEFAULTS)}
    body = differences(desired, defaults)
    return ({**new, **body} if body is not MISSING else new), m.unmapped


def _fit_micro_batches(m: Migration, defaults: dict, desired: dict) -> None:
    """Micro-batch sizes verl 0.9.1's engine workers cannot split a rank's share into become the largest that can."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        fixes = guards.micro_batch_fixes(OmegaConf.create(merge(defaults, desired)))
    except (ConfigError, OmegaConfBaseException, TypeError, ValueError):
        return  # a shape the guards refuse at training time, or sections of the wrong type: reported elsewhere
    for key, (old, new) in fixes.items():
        m.set(key, new)
        put(desired, key, m.desired[key])
        m.report(key, f"{old} does not split each rank's share into whole micro-batches, which verl 0.9.1's "
                      f"engine workers stop on; set to {new}")  # fmt: skip


# the order of sections in the written file, as in the shipped configs
SECTION_ORDER = ("hydra", "defaults", "reasoning_gym", "data", "actor_rollout_ref", "algorithm", "reward", "trainer")
# the order of the reasoning_gym section's keys, as rg_verl.data.config.ReasoningGymConfig declares them
REASONING_GYM_ORDER = ("datasets", "val_datasets", "seed", "train_size", "val_size", "eval_size", "system_prompt",
                       "curriculum", "adaptive_weights")  # fmt: skip


def _ordered(section: Mapping, order: Sequence[str]) -> dict:
    ordered = {key: section[key] for key in order if key in section}
    ordered.update({key: value for key, value in section.items() if key not in ordered})
    return ordered


def render(new: Mapping, unmapped: Unmapped, source: str | None = None) -> str:
    """The YAML text of a migrated config; its header lists what was not carried over, or not exactly."""
    import yaml

    origin = f" from {source}" if source else ""
    layers = ", ".join(d for d in DEFAULTS if d != "_self_")
    wrap = functools.partial(textwrap.wrap, width=116, break_on_hyphens=False, break_long_words=False)
    header = wrap(
        f"Migrated{origin} by `{COMMAND}`: a config of reasoning-gym's training scripts as an rg-verl config "
        f"over {layers}, listing only what differs from them."
    )
    if unmapped:
        header.append("Not carried over, or not exactly:")
        for key, why in unmapped:
            header += wrap(f"{key}: {why}", initial_indent="  ", subsequent_indent="      ")
    ordered = _ordered(new, SECTION_ORDER)
    if isinstance(ordered.get("reasoning_gym"), Mapping):
        ordered["reasoning_gym"] = _ordered(ordered["reasoning_gym"], REASONING_GYM_ORDER)
    body = yaml.safe_dump(ordered, sort_keys=False, default_flow_style=False, width=120, allow_unicode=True)
    return "".join(f"# {line}\n" for line in header) + "\n" + body


def write_config(path: str | os.PathLike, text: str, overwrite: bool = False) -> None:
    """Write ``text`` to ``path`` atomically; an existing file needs ``overwrite``."""
    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} exists; pass --overwrite to replace it")
    write_atomic(path, text)
