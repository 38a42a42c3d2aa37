"""The reference's own config sections (``reasoning_gym``, ``curriculum``, ``reward``) in rg-verl's schema."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from rg_verl.migrate.tree import Migration, get, same
from rg_verl.reward.config import RewardConfig

__all__ = ["REWARD_KWARGS", "TERMS", "curriculum", "reasoning_gym", "reward", "starting_config"]

REWARD_KWARGS = "reward.custom_reward_function.reward_kwargs"
# the reference's secondary rewards -> our terms of the same definition (rg_verl.reward.terms)
TERMS = {"format": "reference_format", "length": "reference_length", "cosine": "reference_cosine"}
# the kwargs each secondary reward reads, with the reference's defaults -> reward_kwargs.reference_terms
TERM_OPTIONS = {"format": {"preappend_thinking_token": False}, "length": {"max_output_length": 1024}, "cosine": {}}
CURRICULUM_KEYS = ("enabled", "schedule", "last_k", "success_threshold", "failure_threshold", "curricula")
CURRICULUM = "reasoning_gym.curriculum"


def _mapping(m: Migration, where: str, value: Any) -> dict:
    """``value`` as a dict (blank: empty); anything else is reported and read as empty."""
    if value is None or isinstance(value, Mapping):
        return dict(value or {})
    m.report(where, f"{value!r} is not a mapping; not carried over")
    return {}


def reasoning_gym(m: Migration, curriculum_mix: dict | None) -> None:
    """``dataset_size`` -> ``train_size``, ``developer_prompt`` -> ``system_prompt``, ``datasets`` as they are."""
    for key, value in _mapping(m, "reasoning_gym", m.old.get("reasoning_gym")).items():
        where = f"reasoning_gym.{key}"
        if key == "dataset_size":
            m.set("reasoning_gym.train_size", value)
            m.report(where, f"mapped to reasoning_gym.train_size; the reference also validated on {value} items "
                     "(all of them, in one batch), rg-verl on reasoning_gym.val_size: set that")  # fmt: skip
        elif key == "developer_prompt":
            m.set("reasoning_gym.system_prompt", value)
            if not _is_prompt_key(value):
                m.report(where, f"{value!r} is not a key of reasoning_gym.utils.SYSTEM_PROMPTS (the reference "
                         "would fail); rg-verl takes it as the prompt's literal text")  # fmt: skip
        elif key == "datasets" and curriculum_mix is None:
            m.set("reasoning_gym.datasets", _mix(m, _mapping(m, where, value)))
        elif key == "datasets":
            if value := _mapping(m, where, value):
                m.report(where, "curriculum.enabled is true: the reference trained on curriculum.curricula only and "
                         f"ignored this mix ({', '.join(map(str, value))})")  # fmt: skip
        else:
            m.report(where, "not one of the reference's dataset_size, developer_prompt, datasets; not carried over")
    if curriculum_mix is not None:
        m.set("reasoning_gym.datasets", curriculum_mix)


def _mix(m: Migration, datasets: Mapping) -> dict:
    mix = {}
    for name, spec in datasets.items():
        where = f"reasoning_gym.datasets.{name}"
        if not isinstance(spec or {}, Mapping):
            m.report(where, f"{spec!r} is not a {{weight, config}} entry; not carried over")
            continue
        spec = dict(spec or {})
        entry, config = {"weight": spec.pop("weight", 1.0)}, _mapping(m, f"{where}.config", spec.pop("config", None))
        for reserved in ("seed", "size"):
            if config.pop(reserved, None) is not None:
                m.report(
                    f"{where}.config.{reserved}", "set by rg-verl (reasoning_gym.seed, reasoning_gym.<split>_size)"
                )
        if config:
            entry["config"] = config
        for key in spec:
            m.report(f"{where}.{key}", "not one of a reference dataset's weight, config; not carried over")
        mix[name] = entry
    return mix


def _is_prompt_key(value: Any) -> bool:
    from reasoning_gym.utils import SYSTEM_PROMPTS

    return isinstance(value, str) and value in SYSTEM_PROMPTS


def curriculum(m: Migration) -> dict | None:
    """The curriculum's settings; the training mix an enabled one implies (None when it is off or absent)."""
    section = m.old.get("curriculum")
    if section is None:
        return None
    if not isinstance(section, Mapping):
        m.report("curriculum", f"{section!r} is not a section; not carried over")
        return None
    for key in section:
        if key not in CURRICULUM_KEYS:
            m.report(f"curriculum.{key}", f"not one of the reference's {', '.join(CURRICULUM_KEYS)}")
    if not section.get("enabled"):
        rest = sorted(k for k in section if k in CURRICULUM_KEYS and k != "enabled")
        if rest:
            m.report("curriculum", f"enabled is false: the reference never read the rest of the section "
                     f"({', '.join(rest)}); not carried over")  # fmt: skip
        return None
    m.set(f"{CURRICULUM}.enabled", True)
    if "last_k" in section:
        m.set(f"{CURRICULUM}.last_k", section["last_k"])
        m.set(f"{CURRICULUM}.min_samples", section["last_k"])  # the reference waits for a full window
    for key in ("success_threshold", "failure_threshold"):
        if key in section:
            m.set(f"{CURRICULUM}.{key}", section[key])
    _schedule(m, _mapping(m, "curriculum.schedule", section.get("schedule")))
    levels, mix = _curricula(m, _mapping(m, "curriculum.curricula", section.get("curricula")))
    m.set(f"{CURRICULUM}.levels", levels)
    m.set("data.dataloader_num_workers", 0)  # the curriculum changes the dataset in the trainer process
    return mix


def _schedule(m: Migration, schedule: dict) -> None:
    for key in schedule:
        if key not in ("automatic", "update_steps"):
            m.report(f"curriculum.schedule.{key}", "not one of the reference's automatic, update_steps")
    if schedule.get("automatic") and "update_steps" in schedule:
        m.set(f"{CURRICULUM}.schedule_every", schedule["update_steps"])
    elif schedule.get("automatic"):
        m.report("curriculum.schedule.automatic", "true without update_steps (the reference would fail); "
                 "the threshold rule is kept")  # fmt: skip
    elif "update_steps" in schedule:
        m.report("curriculum.schedule.update_steps", "read only when schedule.automatic is true; the reference "
                 "used the thresholds, as rg-verl does with schedule_every: 0")  # fmt: skip


def _curricula(m: Migration, curricula: Mapping) -> tuple[dict, dict]:
    """``levels`` and the training mix: each curriculum's dataset, configured at its starting levels."""
    levels, mix = {}, {}
    for name, spec in curricula.items():
        spec = _mapping(m, f"curriculum.curricula.{name}", spec)
        levels[name] = _mapping(m, f"curriculum.curricula.{name}.attribute_levels", spec.pop("attribute_levels", None))
        mix[name] = {"weight": spec.pop("weight", 1.0)}
        start = starting_config(name, levels[name])
        if start:
            mix[name]["config"] = start
        for key in spec:
            m.report(f"curriculum.curricula.{name}.{key}", "not one of a reference curriculum's attribute_levels, "
                     "weight; not carried over")  # fmt: skip
    return levels, mix


def starting_config(name: str, levels: Mapping[str, int]) -> dict:
    """The fields reasoning-gym's curriculum of ``name`` sets at ``levels`` (``"*"``: every attribute).

    >>> starting_config("knights_knaves", {"*": 0})
    {'n_people': 2, 'depth_constraint': 2, 'width_constraint': 2}
    """
    from reasoning_gym.factory import create_curriculum

    try:
        curriculum = create_curriculum(name)
        if "*" in levels:
            curriculum.set_global_level(levels["*"])
        for attribute, level in levels.items():
            if attribute != "*":
                curriculum.set_attr_level(attribute, level)
        generated = vars(curriculum.generate_configuration())
    except (KeyError, ValueError, TypeError, IndexError, AttributeError):
        return {}
    fields = {}  # insertion-ordered: the attributes' order
    for attribute in curriculum.attributes.values():
        for key in ("field_name", "lower_field_name", "upper_field_name"):
            field = getattr(attribute, key, None)
            if field in generated:
                value = generated[field]
                fields[field] = list(value) if isinstance(value, tuple) else value
    return fields


def reward(m: Migration) -> None:
    """``secondary_rewards`` -> ``reward_kwargs.terms`` (every other term of ours off) and ``reference_terms``."""
    section = _mapping(m, "reward", m.old.get("reward"))
    if section.get("use_accuracy", True) is False:
        m.report("reward.use_accuracy", "false: rg-verl's reward always includes correctness; no equivalent")
    weights: dict[str, float] = {}
    options: dict[str, Any] = {}
    rewards = section.get("secondary_rewards") or []
    if not isinstance(rewards, list):
        m.report("reward.secondary_rewards", f"{rewards!r} is not a list; not carried over")
        rewards = []
    for index, entry in enumerate(rewards):
        where = f"reward.secondary_rewards[{index}]"
        _secondary_reward(m, where, _mapping(m, where, entry), weights, options)
    terms = get(m.defaults, f"{REWARD_KWARGS}.terms")
    for name in {**(terms if isinstance(terms, Mapping) else {}), **weights}:
        m.set(f"{REWARD_KWARGS}.terms.{name}", weights.get(name, 0.0))
    for key, value in options.items():
        if not same(value, _option_default(key)):  # the reference's defaults are ours: nothing to write
            m.set(f"{REWARD_KWARGS}.reference_terms.{key}", value)


def _secondary_reward(m: Migration, where: str, entry: dict, weights: dict, options: dict) -> None:
    name, weight = entry.pop("name", None), entry.pop("scaling_factor", 1.0)
    kwargs = _mapping(m, f"{where}.kwargs", entry.pop("kwargs", None))
    for key in entry:
        m.report(f"{where}.{key}", "not one of a secondary reward's name, scaling_factor, kwargs; not carried over")
    if not isinstance(name, str) or name not in TERMS:
        m.report(where, f"{name!r}: the reference has no such reward and skipped it (it has {', '.join(TERMS)})")
        return
    if isinstance(weight, bool) or not isinstance(weight, int | float):
        m.report(f"{where}.scaling_factor", f"{weight!r} is not a number; the reward is not carried over")
        return
    weights[TERMS[name]] = weights.get(TERMS[name], 0.0) + float(weight)
    for key, value in kwargs.items():
        at = f"{where}.kwargs.{key}"
        if key == "max_score" and name == "length":
            if not same(value, 1.0):
                m.report(at, f"{value!r}: rg-verl's reference_length scores against 1.0; no equivalent")
        elif key not in TERM_OPTIONS[name]:
            m.report(at, f"the reference's {name} reward never reads it; not carried over")
        elif key in options and not same(options[key], value):
            m.report(at, f"{value!r} conflicts with {options[key]!r} from another entry; the first is kept")
        else:
            options[key] = value


@functools.cache
def _option_default(key: str) -> Any:
    """Our default of ``reward_kwargs.reference_terms.<key>``: the reference's default, by their definition."""
    return getattr(RewardConfig().reference_terms, key)
