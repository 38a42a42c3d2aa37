"""The tiny model's optional *warm start*: short supervised training toward a reachable format."""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rg_verl.common.chat_template import response_prefix
from rg_verl.common.names import (
    ANSWER_CLOSE,
    ANSWER_OPEN,
    MAX_ATTEMPTS,
    MAX_SEED,
    SPLIT_STRIDE,
    SPLITS,
    chat_messages,
    formatted,
    system_prompt,
)  # fmt: skip
from rg_verl.common.schema import ConfigError, named_mappings, option, parse_section
from rg_verl.data.holdout import split_of

__all__ = [
    "WARM_START_DEFAULTS",
    "WARM_START_RECORD",
    "WarmStartOptions",
    "run_warm_start",
    "warm_start_options",
    "warm_start_response",
]

# what a warm-started model records about how it was built (absent for a plain random model)
WARM_START_RECORD = "warm_start.json"
# the warm start's seeds start above every split's seed space: it never sees an item RL trains or evaluates on
WARM_START_SEED_BASE = MAX_SEED + len(SPLITS) * SPLIT_STRIDE
# each warm-start seed takes a block of this many generator seeds (its datasets, then their items)
_SEED_BLOCK = 1000
# generator seeds must stay below 2**32 (some generators seed numpy): the largest seed and prompt count
MAX_PROMPTS = 10**6
# (a dataset's candidates take up to MAX_ATTEMPTS["train"] blocks of its prompt count: held-out questions are skipped)
MAX_WARM_START_SEED = (2**32 - WARM_START_SEED_BASE - MAX_ATTEMPTS["train"] * MAX_PROMPTS) // _SEED_BLOCK - 1
_THOUGHTS = ("let me think", "work it out", "step by step", "check the numbers", "read the question", "count them")


def _prompt_datasets(where: str, value: Any) -> dict[str, dict]:
    """``datasets`` as name -> config: from a name, a list of names, or the ``reasoning_gym.datasets`` shape."""
    names = [value] if isinstance(value, str) else value
    if isinstance(names, list | tuple):
        value = dict.fromkeys(names)
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: {value!r} is not a dataset name, a list of names or a mapping name -> config")
    datasets = named_mappings(where, value, "{dataset: config}", "the dataset's config, e.g. {}")
    for name, config in datasets.items():
        if set(config) <= {"weight", "config"} and config:  # the reasoning_gym.datasets shape
            datasets[name] = dict(config.get("config") or {})
    if not datasets:
        raise ConfigError(f"{where}: no reasoning-gym dataset to draw prompts from; set one, e.g. [chain_sum]")
    return datasets


@dataclass(frozen=True)
class WarmStartOptions:
    """The options of the supervised warm start (:func:`run_warm_start`), with their defaults."""

    steps: int = option(
        150, "optimizer steps (after 60 the format is not yet reachable by sampling)", low=1, high=10**6
    )
    batch_size: int = option(16, "sequences per step", low=1, high=10**4)
    lr: float = option(3e-3, "AdamW learning rate", low=0.0, high=1.0)
    format_rate: float = option(0.3, "share of training responses in the strict think/answer format", low=0.0, high=1.0)
    datasets: dict[str, dict] = option(
        {"chain_sum": {}},
        "reasoning-gym dataset -> its config, for the prompts (or a list of names); outside a run: chain_sum",
        parse=_prompt_datasets,
        doc_default="the run's generated datasets",
    )
    system_prompt: str = option(
        "default", "a key of reasoning_gym.utils.SYSTEM_PROMPTS, or literal text",
        doc_default="reasoning_gym.system_prompt",
    )
    num_prompts: int = option(
        256, "distinct prompts drawn from (each step picks batch_size of them)", low=1, high=MAX_PROMPTS
    )
    seed: int = option(
        0, "seeds the prompts, the formats, the batch order and the torch RNG", low=0, high=MAX_WARM_START_SEED
    )


# the defaults as a plain dict (what warm_start_options({}) gives)
WARM_START_DEFAULTS: dict[str, Any] = dataclasses.asdict(WarmStartOptions())


def warm_start_options(options: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``options`` checked and completed with the defaults of :class:`WarmStartOptions`, as plain JSON types."""
    if options is None:
        return None
    parsed = parse_section(WarmStartOptions, options, "warm_start")
    return json.loads(json.dumps(dataclasses.asdict(parsed)))  # plain JSON types: comparable with the saved record


def warm_start_response(answer: str, strict: bool, rng: random.Random) -> str:
    """A short training response: strict think/answer format when ``strict``, else free text.

    >>> warm_start_response("7", True, random.Random(0))
    '<think>\\ncheck the numbers\\n</think>\\n<answer>7</answer>'
    """
    thought = rng.choice(_THOUGHTS)
    if strict:
        return formatted(thought, answer)
    lenient = f"{ANSWER_OPEN}{answer}{ANSWER_CLOSE}"
    return rng.choice((f"{thought}. The answer is {answer}.", f"{answer}", f"{thought}: {answer}", lenient))


def _training_share_items(name: str, config: dict, seed: int, count: int) -> list[dict]:
    """``count`` items of dataset ``name`` whose questions belong to the training share (rg_verl.data.holdout)."""
    import reasoning_gym

    items: list[dict] = []
    for block in range(MAX_ATTEMPTS["train"]):
        candidates = reasoning_gym.create_dataset(name, **config, seed=seed + block * count, size=count)
        items += [entry for entry in candidates if split_of(entry["question"]) == "train"]
        if len(items) >= count:
            return items[:count]
    raise ValueError(
        f"tiny_model.warm_start: dataset {name!r} gave {len(items)} of {count} prompts in the training share "
        f"from {MAX_ATTEMPTS['train'] * count} candidates; its space at these params is almost all held out, "
        "so pick another dataset or widen its params"
    )


def _prompts(tokenizer: Any, options: dict[str, Any]) -> list[tuple[list[int], str]]:
    """(prompt token ids, answer) pairs: chat-formatted reasoning-gym items, datasets taking turns."""
    names = list(options["datasets"])
    count = -(-options["num_prompts"] // len(names))
    system = system_prompt(options["system_prompt"])
    items: dict[str, list[dict]] = {}
    for offset, name in enumerate(names):
        seed = WARM_START_SEED_BASE + options["seed"] * _SEED_BLOCK + offset
        items[name] = _training_share_items(name, options["datasets"][name], seed, count)
    prompts = []
    for i in range(options["num_prompts"]):
        entry = items[names[i % len(names)]][i // len(names)]
        text = tokenizer.apply_chat_template(
            chat_messages(system, entry["question"]), add_generation_prompt=True, tokenize=False
        )
        prompts.append((tokenizer(text, add_special_tokens=False)["input_ids"], str(entry["answer"])))
    return prompts


def run_warm_start(model: Any, tokenizer: Any, options: Mapping[str, Any] | None = None) -> dict[str, float]:
    """Short supervised next-token training of ``model`` in place (see the module docstring)."""
    import torch

    opts = warm_start_options(options or {})
    rng = random.Random(opts["seed"])
    torch.manual_seed(opts["seed"])
    threads = torch.get_num_threads()
    # one thread: the same reductions in the same order whatever the core count (and no slower for a model this small)
    torch.set_num_threads(1)
    try:
        return _train(model, tokenizer, opts, rng)
    finally:
        torch.set_num_threads(threads)


def _batch(rows: list[tuple[list[int], list[int]]], pad_id: int) -> dict[str, Any]:
    """Right-padded ``input_ids``, ``attention_mask`` and ``labels`` (the response only) of (prompt, response) rows."""
    import torch

    width = max(len(p) + len(r) for p, r in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    for row, (prompt_ids, response_ids) in enumerate(rows):
        ids = prompt_ids + response_ids
        input_ids[row, : len(ids)] = torch.tensor(ids)
        attention[row, : len(ids)] = 1
        labels[row, len(prompt_ids) : len(ids)] = torch.tensor(response_ids)
    return {"input_ids": input_ids, "attention_mask": attention, "labels": labels}


def _train(model: Any, tokenizer: Any, opts: dict[str, Any], rng: random.Random) -> dict[str, float]:
    import torch

    prompts = _prompts(tokenizer, opts)
    # a thinking template has opened the think block already: the model writes what follows
    prefix = response_prefix(tokenizer)
    eos_id, pad_id = tokenizer.eos_token_id, tokenizer.pad_token_id
    optimizer = torch.optim.AdamW(model.parameters(), lr=opts["lr"], weight_decay=0.0)
    model.train()
    losses = []
    for _ in range(opts["steps"]):
        rows = []
        for prompt_ids, answer in rng.sample(prompts, min(opts["batch_size"], len(prompts))):
            text = warm_start_response(answer, rng.random() < opts["format_rate"], rng)
            text = text[len(prefix) :] if prefix and text.startswith(prefix) else text
            rows.append((prompt_ids, tokenizer(text, add_special_tokens=False)["input_ids"] + [eos_id]))
        loss = model(**_batch(rows, pad_id)).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    model.eval()
    return {"loss_first": losses[0], "loss_last": losses[-1]}
