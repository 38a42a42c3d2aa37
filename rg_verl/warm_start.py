"""The tiny model's optional *warm start*: short supervised training toward a reachable format.

Next-token training on chat-formatted reasoning-gym prompts followed by responses of which only a
share (``format_rate``) has the strict ``<think>…</think><answer>…</answer>`` format. A random model
almost never writes that format; a warm-started one writes it some of the time, so a format reward is
reachable by sampling but not saturated, and an RL run on it has something to learn.
``rg_verl.tiny_model.build_tiny_model(..., warm_start=options)`` runs it and records the options in
:data:`WARM_START_RECORD`.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from typing import Any

from rg_verl.vocab import ANSWER_CLOSE, ANSWER_OPEN, SPLIT_STRIDE, SPLITS, chat_messages, formatted, system_prompt

__all__ = ["WARM_START_DEFAULTS", "WARM_START_RECORD", "run_warm_start", "warm_start_options", "warm_start_response"]

# what a warm-started model records about how it was built (absent for a plain random model)
WARM_START_RECORD = "warm_start.json"

# Options of the supervised warm start (see :func:`run_warm_start`) and their defaults.
WARM_START_DEFAULTS: dict[str, Any] = {
    "steps": 150,  # optimizer steps (after 60 the format is not yet reachable by sampling)
    "batch_size": 16,  # sequences per step
    "lr": 3e-3,  # AdamW learning rate
    "format_rate": 0.3,  # share of training responses in the strict think/answer format
    "datasets": {"chain_sum": {}},  # reasoning-gym dataset name -> its config, for the prompts
    "system_prompt": "default",  # a key of reasoning_gym.utils.SYSTEM_PROMPTS, or literal text
    "num_prompts": 256,  # distinct prompts drawn from (each step picks batch_size of them)
    "seed": 0,  # prompts, formats, batch order and the torch RNG
}
# Seeds of the warm start's reasoning-gym items start above every split's seed space of
# rg_verl.data.dataset (split k uses [seed + k * SPLIT_STRIDE, seed + (k + 1) * SPLIT_STRIDE) for a
# base seed below SPLIT_STRIDE), so the warm start never sees an item RL trains, validates or is evaluated on.
WARM_START_SEED_BASE = len(SPLITS) * SPLIT_STRIDE
_THOUGHTS = ("let me think", "work it out", "step by step", "check the numbers", "read the question", "count them")


def _datasets(value: Any) -> dict[str, dict]:
    """``datasets`` as name -> config: from a name, a list of names, or the ``reasoning_gym.datasets`` shape."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, Mapping):
        value = {name: {} for name in value}
    datasets = {}
    for name, config in value.items():
        config = dict(config or {})
        if set(config) <= {"weight", "config"} and config:  # the reasoning_gym.datasets shape
            config = dict(config.get("config") or {})
        datasets[str(name)] = config
    if not datasets:
        raise ValueError("warm_start.datasets is empty")
    return datasets


def warm_start_options(options: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``options`` completed with :data:`WARM_START_DEFAULTS`, as plain JSON types; None stays None.

    ``datasets`` may be a list of names or a mapping name -> config (or -> ``{weight, config}``,
    the shape of ``reasoning_gym.datasets``; the weight is ignored: datasets take turns).

    Raises:
        ValueError: On an unknown option or an out-of-range value.
    """
    if options is None:
        return None
    unknown = sorted(set(options) - set(WARM_START_DEFAULTS))
    if unknown:
        raise ValueError(f"warm_start: unknown option(s) {unknown}; valid: {', '.join(WARM_START_DEFAULTS)}")
    merged = {**WARM_START_DEFAULTS, **options}
    merged["datasets"] = _datasets(merged["datasets"])
    for key in ("steps", "batch_size", "num_prompts"):
        merged[key] = int(merged[key])
        if merged[key] < 1:
            raise ValueError(f"warm_start.{key} must be >= 1, got {merged[key]}")
    merged["lr"] = float(merged["lr"])
    merged["format_rate"] = float(merged["format_rate"])
    if not 0.0 <= merged["format_rate"] <= 1.0:
        raise ValueError(f"warm_start.format_rate must be in [0, 1], got {merged['format_rate']}")
    merged["seed"] = int(merged["seed"])
    return json.loads(json.dumps(merged))  # plain JSON types: comparable with the saved record


def warm_start_response(answer: str, strict: bool, rng: random.Random) -> str:
    """A short training response: strict think/answer format when ``strict``, else free text.

    Both kinds carry the same answer, so the two differ in their format only. Free text is a
    plain sentence, or a bare ``<answer>`` block (the lenient format, without the think block).

    >>> warm_start_response("7", True, random.Random(0))
    '<think>\\ncheck the numbers\\n</think>\\n<answer>7</answer>'
    """
    thought = rng.choice(_THOUGHTS)
    if strict:
        return formatted(thought, answer)
    lenient = f"{ANSWER_OPEN}{answer}{ANSWER_CLOSE}"
    return rng.choice((f"{thought}. The answer is {answer}.", f"{answer}", f"{thought}: {answer}", lenient))


def _prompts(tokenizer: Any, options: dict[str, Any]) -> list[tuple[list[int], str]]:
    """(prompt token ids, answer) pairs: chat-formatted reasoning-gym items, datasets taking turns."""
    import reasoning_gym

    names = list(options["datasets"])
    count = -(-options["num_prompts"] // len(names))
    system = system_prompt(options["system_prompt"])
    items: dict[str, list[dict]] = {}
    for offset, name in enumerate(names):
        seed = WARM_START_SEED_BASE + options["seed"] * 1000 + offset
        items[name] = list(reasoning_gym.create_dataset(name, **options["datasets"][name], seed=seed, size=count))
    prompts = []
    for i in range(options["num_prompts"]):
        entry = items[names[i % len(names)]][i // len(names)]
        text = tokenizer.apply_chat_template(
            chat_messages(system, entry["question"]), add_generation_prompt=True, tokenize=False
        )
        prompts.append((tokenizer(text, add_special_tokens=False)["input_ids"], str(entry["answer"])))
    return prompts


def run_warm_start(model: Any, tokenizer: Any, options: Mapping[str, Any] | None = None) -> dict[str, float]:
    """Short supervised next-token training of ``model`` in place (see the module docstring).

    Each step draws ``batch_size`` prompts and, for each, a fresh coin with probability
    ``format_rate`` for a strictly formatted response, so the model learns that rate for every
    prompt rather than one format per prompt. The loss covers the response and its
    end-of-turn token only. Runs on one torch thread, so a ``seed`` gives the same weights on any
    machine with the same torch build.

    Returns:
        ``loss_first`` and ``loss_last``: the training loss of the first and last step.
    """
    import torch

    opts = warm_start_options(options or {})
    rng = random.Random(opts["seed"])
    torch.manual_seed(opts["seed"])
    threads = torch.get_num_threads()
    # one thread: the same reductions in the same order whatever the machine's core count (and a
    # model this small gains little from more; on a busy 2-core machine one thread is faster)
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
    eos_id, pad_id = tokenizer.eos_token_id, tokenizer.pad_token_id
    optimizer = torch.optim.AdamW(model.parameters(), lr=opts["lr"], weight_decay=0.0)
    model.train()
    losses = []
    for _ in range(opts["steps"]):
        rows = []
        for prompt_ids, answer in rng.sample(prompts, min(opts["batch_size"], len(prompts))):
            text = warm_start_response(answer, rng.random() < opts["format_rate"], rng)
            rows.append((prompt_ids, tokenizer(text, add_special_tokens=False)["input_ids"] + [eos_id]))
        loss = model(**_batch(rows, pad_id)).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    model.eval()
    return {"loss_first": losses[0], "loss_last": losses[-1]}
