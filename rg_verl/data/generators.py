"""reasoning-gym's datasets by name: an unknown name, or a config reasoning-gym rejects, as a ConfigError.

The checks every section that names a generated dataset shares (``reasoning_gym.datasets``, the curriculum's
levels, the tiny model's warm start, the evaluation configs): reasoning-gym's own registry and config classes
decide, and the error names the field, the close matches and the fix.
"""

from __future__ import annotations

import difflib

from reasoning_gym.factory import DATASETS

from rg_verl.common.schema import ConfigError

__all__ = ["check_generator_config", "dataset_name_error"]


def dataset_name_error(where: str, name: str) -> ConfigError:
    """The error for a name that is not a registered reasoning-gym dataset, with close matches."""
    close = difflib.get_close_matches(name, list(DATASETS), n=3)
    hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    return ConfigError(
        f"{where}: unknown reasoning-gym dataset {name!r}.{hint} "
        "The registered names are the keys of reasoning_gym.factory.DATASETS; "
        "a dataset read from a file (GSM8K, MATH) needs a 'source'."
    )


def check_generator_config(where: str, name: str, config: dict) -> None:
    """reasoning-gym's own check of a dataset's config: its config class, and its ``validate()``."""
    if name not in DATASETS:
        raise dataset_name_error(where, name)
    config_cls = DATASETS[name][1]
    try:
        instance = config_cls(**config)
        if hasattr(instance, "validate"):  # a few reasoning-gym configs have none
            instance.validate()
    except (TypeError, AssertionError, ValueError) as error:
        raise ConfigError(f"{where}.config: reasoning-gym rejects {config}: {error}") from None
