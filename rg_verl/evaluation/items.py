"""Evaluation items: one ``rg_verl.data.dataset.ReasoningGymDataset`` per dataset of the config.

Items come from the dataset's ``eval`` split, whose generator seeds never meet those of training
or validation (see ``rg_verl.data.dataset``). A dataset read from a file (GSM8K, MATH) gives its rows
in order, each once, at most ``size`` of them. Each dataset entry of the YAML gets its own dataset object,
so its ``size``, ``seed`` and ``params`` apply to it alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import OmegaConf

from rg_verl.data.dataset import ReasoningGymDataset
from rg_verl.evaluation.config import DatasetEntry, EvalConfig

__all__ = ["DatasetPlan", "build_plans", "prompt_messages"]

EVAL_SPLIT = "reasoning_gym://eval"


@dataclass
class DatasetPlan:
    """One dataset to evaluate: its category label, its config entry and its items."""

    category: str
    entry: DatasetEntry
    dataset: ReasoningGymDataset

    @property
    def key(self) -> str:
        """``<category>/<dataset>``: the dataset's key in items.jsonl."""
        return f"{self.category}/{self.entry.dataset}"

    def item_key(self, index: int) -> str:
        return f"{self.key}/{index}"

    def __len__(self) -> int:
        return len(self.dataset)


def build_plans(config: EvalConfig) -> list[DatasetPlan]:
    """A :class:`DatasetPlan` per dataset entry, in config order. Generates no item yet."""
    plans = []
    for category in config.categories:
        for entry in category.datasets:
            section = {
                "reasoning_gym": {
                    "datasets": {entry.dataset: entry.mix_spec()},
                    "seed": entry.seed,
                    "eval_size": entry.size,
                    # the developer message is added by prompt_messages, with the configured role
                    "system_prompt": "",
                }
            }
            dataset = ReasoningGymDataset(EVAL_SPLIT, tokenizer=None, config=OmegaConf.create(section))
            if entry.source is not None:  # a file's rows, each once: size caps them
                dataset.max_samples = min(entry.size, len(dataset.datasets[entry.dataset]))
            plans.append(DatasetPlan(category=category.category, entry=entry, dataset=dataset))
    return plans


def prompt_messages(item: dict, config: EvalConfig) -> list[dict[str, str]]:
    """The chat prompt of a dataset item: the developer prompt (if any) in its role, then the question."""
    messages = [dict(m) for m in item["raw_prompt"] if m["role"] != "system"]
    prompt = config.system_prompt
    if prompt:
        messages.insert(0, {"role": config.developer_role, "content": prompt})
    return messages
