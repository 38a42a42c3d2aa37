"""Evaluation items: a ``ReasoningGymDataset``'s ``eval`` split, a file's rows, or reasoning-gym's own per entry."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from omegaconf import OmegaConf

from rg_verl.common.names import EVAL_SPLIT, Messages, chat_messages, data_source
from rg_verl.data.dataset import EmptyShareError, ReasoningGymDataset, item_record
from rg_verl.data.reference_questions import ReferenceItems
from rg_verl.evaluation.config import ITEMS, DatasetEntry, EvalConfig

logger = logging.getLogger(__name__)

__all__ = ["EvalDataset", "eval_datasets", "eval_split", "prompt_messages"]


SPLIT, REFERENCE = ITEMS
FILE = "file"


def eval_split(mix: dict, seed: int, size: int) -> ReasoningGymDataset:
    """The evaluation split of a ``reasoning_gym.datasets`` mix, ``size`` items, without a system message."""
    section = {"datasets": mix, "seed": seed, "eval_size": size, "system_prompt": ""}
    return ReasoningGymDataset(EVAL_SPLIT, tokenizer=None, config=OmegaConf.create({"reasoning_gym": section}))


def reference_item(items: ReferenceItems, index: int) -> dict:
    """Reference item ``index`` in the shape of a ``ReasoningGymDataset`` item (what the runner reads)."""
    return item_record(items[index], None, data_source(items.name), REFERENCE, index, items.name, items.category)


@dataclass
class EvalDataset:
    """One dataset of the config to evaluate: its category label, its config entry and its items."""

    category: str
    entry: DatasetEntry
    items: ReasoningGymDataset | ReferenceItems | None
    size: int
    kind: str = SPLIT

    @classmethod
    def build(cls, category: str, entry: DatasetEntry, items: str = SPLIT) -> EvalDataset:
        """The dataset of ``entry`` on the items asked for; a generator with no evaluation share gets none."""
        if entry.source is None and items == REFERENCE:
            reference = ReferenceItems(entry.dataset, entry.params, entry.seed, entry.size)
            return cls(category=category, entry=entry, items=reference, size=entry.size, kind=REFERENCE)
        kind = SPLIT if entry.source is None else FILE
        try:
            split = eval_split({entry.dataset: entry.mix_spec()}, entry.seed, entry.size)
        except EmptyShareError as error:
            logger.warning("%s/%s: evaluated on no item: %s", category, entry.dataset, error)
            return cls(category=category, entry=entry, items=None, size=0, kind=kind)
        rows = split.distinct_items(entry.dataset)  # a file's rows, each once: they cap the size
        size = entry.size if rows is None else min(entry.size, rows)
        return cls(category=category, entry=entry, items=split, size=size, kind=kind)

    @property
    def key(self) -> str:
        """``<category>/<dataset>``: the dataset's key in items.jsonl."""
        return f"{self.category}/{self.entry.dataset}"

    def item_key(self, index: int) -> str:
        """The item's key in items.jsonl; a reference item's never ends in a bare number, as the split's do."""
        return f"{self.key}/{REFERENCE}:{index}" if self.kind == REFERENCE else f"{self.key}/{index}"

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> dict:
        if not 0 <= index < self.size:
            raise IndexError(f"{self.key}: item {index} is out of range (size {self.size})")
        if self.kind == REFERENCE:
            return reference_item(self.items, index)
        return self.items[index]


def eval_datasets(config: EvalConfig) -> list[EvalDataset]:
    """An :class:`EvalDataset` per dataset entry, in config order. Generates no item yet."""
    return [
        EvalDataset.build(c.category, entry, entry.items or config.items)
        for c in config.categories
        for entry in c.datasets
    ]


def prompt_messages(item: dict, config: EvalConfig) -> Messages:
    """The chat prompt of a dataset item: the developer prompt (if any) in its role, then the question."""
    return chat_messages(config.system_prompt, item["raw_prompt"][-1]["content"], system_role=config.developer_role)
