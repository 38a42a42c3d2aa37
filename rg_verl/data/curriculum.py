"""Curriculum levels and adaptive weights of the training mix (:class:`MixState`), saved in verl's ``data.pt``."""

from __future__ import annotations

from collections import deque
from types import SimpleNamespace
from typing import TYPE_CHECKING

from reasoning_gym.factory import create_curriculum

if TYPE_CHECKING:
    from rg_verl.data.config import AdaptiveWeightsConfig, CurriculumConfig, DatasetSpec


class LevelCurriculum:
    """A curriculum over a file dataset's difficulty levels (MATH: 1 to 5): one attribute, ``max_level``."""

    ATTRIBUTE = "max_level"
    # MATH's levels, used where the config sets no bound
    DEFAULT_RANGE = (1, 5)

    @classmethod
    def level_range(cls, config: dict) -> tuple[int, int]:
        """The (lowest, highest) maximum level a dataset with this ``config`` can reach."""
        return config.get("min_level", cls.DEFAULT_RANGE[0]), config.get("max_level", cls.DEFAULT_RANGE[1])

    def __init__(self, min_level: int = 1, max_level: int = 5):
        self.levels = list(range(min_level, max_level + 1))
        self.attributes = {self.ATTRIBUTE: SimpleNamespace(levels=self.levels)}
        self.current = self.levels[0]

    def _set(self, value: int) -> bool:
        value = min(max(value, self.levels[0]), self.levels[-1])
        moved, self.current = value != self.current, value
        return moved

    def set_global_level(self, value: int) -> None:
        self._set(value)

    def set_attr_level(self, attribute: str, value: int) -> None:
        self._set(value)

    def get_attr_level(self, attribute: str) -> int:
        return self.current

    def get_max_level(self) -> int:
        return self.current

    def increment_global_level(self) -> bool:
        return self._set(self.current + 1)

    def decrement_global_level(self) -> bool:
        return self._set(self.current - 1)

    def generate_configuration(self, defaults: dict | None = None) -> SimpleNamespace:
        return SimpleNamespace(**{**(defaults or {}), self.ATTRIBUTE: self.current})


def adaptive_weights(
    base: dict[str, float], success: dict[str, float | None], floor: float
) -> dict[str, float]:
    """Weights ``floor * b + (1 - floor) * b * p(1-p) / sum(b * p(1-p))``; p None counts as 0.5 (``docs/data.md``).

    >>> adaptive_weights({"a": 1, "b": 1}, {"a": 0.5, "b": 1.0}, floor=0.2)
    {'a': 0.9, 'b': 0.1}
    >>> adaptive_weights({"a": 1, "b": 3}, {"a": 1.0, "b": 0.0}, floor=0.2)
    {'a': 0.25, 'b': 0.75}
    """
    total = sum(base.values())
    prior = {name: weight / total for name, weight in base.items()}
    informative = {
        name: prior[name] * (0.25 if success.get(name) is None else success[name] * (1 - success[name]))
        for name in prior
    }
    mass = sum(informative.values())
    if mass <= 0:
        return prior
    return {name: floor * prior[name] + (1 - floor) * (informative[name] / mass) for name in prior}


class MixState:
    """Levels, result windows and weights of a training mix."""

    def __init__(self, mix: dict[str, DatasetSpec], curriculum: CurriculumConfig, adaptive: AdaptiveWeightsConfig):
        self.base_weights = {name: spec.weight for name, spec in mix.items()}
        self.curriculum_config = curriculum
        self.adaptive_config = adaptive
        self.curricula = {}
        if curriculum.enabled:
            for name, levels in curriculum.levels.items():
                spec = mix[name]
                if spec.source is None:
                    self.curricula[name] = create_curriculum(name)
                else:  # a file dataset's maximum difficulty level
                    self.curricula[name] = LevelCurriculum(*LevelCurriculum.level_range(spec.config))
                self._set_levels(name, levels)
        window = max(curriculum.last_k if curriculum.enabled else 0, adaptive.window if adaptive.enabled else 0, 1)
        self.results = {name: deque(maxlen=window) for name in mix}
        self.weights = dict(self.base_weights)
        self.step = 0

    def _set_levels(self, name: str, levels: dict[str, int]) -> None:
        curriculum = self.curricula[name]
        if "*" in levels:
            curriculum.set_global_level(levels["*"])
        for attribute, level in levels.items():
            if attribute != "*":
                curriculum.set_attr_level(attribute, level)

    def levels(self, name: str) -> dict[str, int]:
        curriculum = self.curricula[name]
        return {attribute: curriculum.get_attr_level(attribute) for attribute in curriculum.attributes}

    def dataset_config(self, name: str, config: dict) -> dict:
        """``config`` with the curriculum's current attribute values for dataset ``name``."""
        if name not in self.curricula:
            return dict(config)
        generated = self.curricula[name].generate_configuration(defaults=dict(config))
        return {key: value for key, value in vars(generated).items() if key not in ("seed", "size")}

    def success_rate(self, name: str, window: int, min_samples: int) -> float | None:
        recent = list(self.results[name])[-window:]
        return sum(recent) / len(recent) if len(recent) >= min_samples else None

    def update(self, results: dict[str, list[float]]) -> list[str]:
        """Record one step's results; returns the datasets whose level changed."""
        self.step += 1
        for name, values in results.items():
            if name in self.results:
                self.results[name].extend(float(v) for v in values)
        changed = self._update_levels() if self.curricula else []
        if self.adaptive_config.enabled:
            config = self.adaptive_config
            success = {name: self.success_rate(name, config.window, config.min_samples) for name in self.results}
            self.weights = adaptive_weights(self.base_weights, success, config.floor)
        return changed

    def _update_levels(self) -> list[str]:
        config = self.curriculum_config
        changed = []
        for name, curriculum in self.curricula.items():
            # as reasoning-gym's trainer: a rate strictly past a threshold decides, and each decision starts a fresh
            # window, even where the level cannot move
            if config.schedule_every:
                decided = self.step % config.schedule_every == 0
                moved = decided and curriculum.increment_global_level()
            else:
                rate = self.success_rate(name, config.last_k, config.min_samples)
                if rate is None:
                    continue
                decided = rate > config.success_threshold or rate < config.failure_threshold
                if rate > config.success_threshold:
                    moved = curriculum.increment_global_level()
                elif rate < config.failure_threshold:
                    moved = curriculum.decrement_global_level()
                else:
                    moved = False
            if moved:
                changed.append(name)
            if decided:
                self.results[name].clear()  # the next decision is judged on a window of its own
        return changed

    def metrics(self) -> dict[str, float]:
        """``curriculum/<dataset>/{level,success_rate,weight}`` (level: highest attribute level)."""
        total = sum(self.weights.values())
        window = self.curriculum_config.last_k if self.curricula else self.adaptive_config.window
        metrics = {}
        for name in self.results:
            metrics[f"curriculum/{name}/weight"] = self.weights[name] / total
            rate = self.success_rate(name, window, 1)
            if rate is not None:
                metrics[f"curriculum/{name}/success_rate"] = rate
            if name in self.curricula:
                metrics[f"curriculum/{name}/level"] = float(self.curricula[name].get_max_level())
        return metrics

    def state_dict(self) -> dict:
        return {
            "step": self.step,
            "levels": {name: self.levels(name) for name in self.curricula},
            "results": {name: list(values) for name, values in self.results.items()},
            "weights": dict(self.weights),
        }

    def load_state_dict(self, state: dict) -> None:
        self.step = state["step"]
        for name, levels in state["levels"].items():
            if name in self.curricula:
                self._set_levels(name, levels)
        for name, values in state["results"].items():
            if name in self.results:
                self.results[name].clear()
                self.results[name].extend(values)
        self.weights.update({name: w for name, w in state["weights"].items() if name in self.weights})
