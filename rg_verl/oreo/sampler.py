"""One collection's sampling: items through a backend, scored in a thread by the training reward, into shards."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rg_verl.common.hf_generate import saved_eos_token_ids
from rg_verl.evaluation.backends import Sampling
from rg_verl.evaluation.backends.hf import prompt_token_ids
from rg_verl.oreo.trajectories import shard_is_stored, shard_name, write_shard
from rg_verl.reward.score import count_tokens, reward_config, score_with

__all__ = ["FORMAT", "Sampler", "chunk_seed"]

logger = logging.getLogger(__name__)

FORMAT = "rg-verl OREO trajectories"


def chunk_seed(seed: int, split: str, first_index: int) -> int:
    """The sampling seed of the ``generate`` call whose first item is ``first_index`` of ``split``."""
    return int(hashlib.sha256(f"{seed}:{split}:{first_index}".encode()).hexdigest()[:8], 16) % 2**31


class Sampler:
    """One collection's sampling: the items, the tokenizer, the scorer's settings; generates and writes shards."""

    def __init__(
        self,
        manifest: dict,
        settings: Any,
        out: Path,
        tokenizer: Any,
        backend: Any = None,
        *,
        load: Callable | None = None,
    ):
        self.manifest, self.settings, self.out, self.backend, self.load = manifest, settings, out, backend, load
        self.tokenizer = tokenizer
        self.eos_ids = set(saved_eos_token_ids(settings.model_path, self.tokenizer))
        self.reward = reward_config(**manifest["config"]["reward_kwargs"])
        self.template_kwargs = manifest["config"]["apply_chat_template_kwargs"]
        sampling = manifest["sampling"]
        self.sampling = Sampling(sampling["max_tokens"], sampling["temperature"], sampling["top_p"])
        self.done = {"completions": 0, "tokens": 0, "seconds": 0.0}
        self.prompts_checked = False

    def collect(self, split: str, dataset: Any) -> None:
        """Generates and writes the shards of ``split`` that are not stored yet."""
        (start, stop), size = self.manifest["items"][split], self.manifest["shard_size"]
        shards = [(n, first, min(first + size, stop)) for n, first in enumerate(range(start, stop, size))]
        for number, first, end in shards:
            path = self.out / split / shard_name(number)
            metadata = {
                "format": FORMAT, "split": split, "shard": number, "items": [first, end],
                "samples_per_item": self.manifest["samples_per_item"], "model_path": self.settings.model_path,
                "tokenizer_fingerprint": self.manifest["tokenizer_fingerprint"],
            }  # fmt: skip
            if shard_is_stored(path, metadata):
                logger.info("%s shard %d/%d is complete; skipped", split, number + 1, len(shards))
                continue
            if self.backend is None:  # loaded once a shard needs it, and outside its timing
                self.backend = self.load()
            started = time.time()
            rows = self.shard_rows(split, dataset, first, end)
            write_shard(path, rows, metadata)
            self.report(f"{split} shard {number + 1}/{len(shards)}", rows, time.time() - started)

    def shard_rows(self, split: str, dataset: Any, first: int, end: int) -> list[dict]:
        """The rows of items ``[first, end)``, each batch scored while the backend samples the next."""
        size, rows, pending = self.manifest["batch_size"], [], None
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="oreo-score") as pool:
            for chunk in range(first, end, size):
                indices = range(chunk, min(chunk + size, end))
                items, outputs = self.sample(split, dataset, indices)
                if pending is not None:
                    rows += pending.result()
                pending = pool.submit(self.rows, split, indices, items, outputs)
            rows += pending.result() if pending is not None else []
        return rows

    def report(self, what: str, rows: list[dict], seconds: float) -> None:
        tokens = sum(len(row["response_ids"]) for row in rows)
        for key, value in (("completions", len(rows)), ("tokens", tokens), ("seconds", seconds)):
            self.done[key] += value
        logger.info("%s: %d completions in %.1f s: %.2f completions/s, %.1f tokens/s", what, len(rows), seconds,
                    len(rows) / max(seconds, 1e-9), tokens / max(seconds, 1e-9))  # fmt: skip

    def sample(self, split: str, dataset: Any, indices: range) -> tuple[list[dict], list]:
        """(items, the backend's completions of each) for ``indices`` of ``split``."""
        items = [dataset[i] for i in indices]
        k = self.manifest["samples_per_item"]
        sampling = dataclasses.replace(self.sampling, seed=chunk_seed(self.manifest["seed"], split, indices[0]))
        outputs = self.backend.generate([item["raw_prompt"] for item in items], k, sampling)
        if len(outputs) != len(items) or any(len(out) != k for out in outputs):
            raise RuntimeError(f"the {self.settings.backend} backend returned the wrong number of completions")
        return items, outputs

    def rows(self, split: str, indices: range, items: list[dict], outputs: list) -> list[dict]:
        """The trajectory rows of sampled items: ids, finished, and every score of the training reward."""
        prompts = self.prompt_ids([item["raw_prompt"] for item in items], outputs)
        rows, counts = [], self.token_counts([c.text for completions in outputs for c in completions])
        for index, item, prompt, completions in zip(indices, items, prompts, outputs, strict=True):
            for sample_idx, completion in enumerate(completions):
                response_ids, source, finished = self.response_ids(completion)
                scores = score_with(
                    self.reward, item["data_source"], completion.text, item["reward_model"]["ground_truth"],
                    item["extra_info"], response_tokens=next(counts),
                )  # fmt: skip
                rows.append({
                    "uid": f"{split}/{index}", "split": split, "index": index, "sample_idx": sample_idx,
                    "data_source": item["data_source"], "prompt": json.dumps(item["raw_prompt"]), "prompt_ids": prompt,
                    "response": completion.text, "response_ids": response_ids, "ids_source": source,
                    "finished": finished, **{key: float(value) for key, value in scores.items() if key != "pred"},
                })  # fmt: skip
        return rows

    def prompt_ids(self, messages: list, outputs: list) -> list[list[int]]:
        """The ids each prompt's completions were conditioned on: the backend's, else the chat template's."""
        given = [completions[0].prompt_token_ids for completions in outputs]
        if self.prompts_checked and all(ids is not None for ids in given):
            return [list(ids) for ids in given]
        template = [prompt_token_ids(self.tokenizer, m, self.template_kwargs) for m in messages]
        pairs = list(zip(given, template, strict=True))
        if not self.prompts_checked and any(ids is not None and list(ids) != t for ids, t in pairs):
            raise RuntimeError(
                f"the {self.settings.backend} backend conditions on other prompt ids than the chat template's "
                "(those training uses); give it the config's data.apply_chat_template_kwargs"
            )
        self.prompts_checked = True
        return [t if ids is None else list(ids) for ids, t in pairs]

    def token_counts(self, texts: list[str]) -> Iterator[int | None]:
        """The reward's token count of each text, in one tokenizer call (None: the reward counts none)."""
        if not (self.reward.tokenizer_path and self.reward.max_response_length):
            return iter([None] * len(texts))
        return iter(count_tokens(texts, self.reward.tokenizer_path, int(self.reward.max_response_length)))

    def response_ids(self, completion: Any) -> tuple[list[int], str, bool]:
        """(ids, ids_source, finished) of a completion: the backend's ids, else its text plus EOS, tokenised."""
        if completion.token_ids is not None:
            ids = [int(i) for i in completion.token_ids]
            return ids, "backend", bool(ids) and ids[-1] in self.eos_ids
        ids = self.tokenizer(completion.text, add_special_tokens=False)["input_ids"]
        finished = completion.num_tokens is None or completion.num_tokens < self.sampling.max_tokens
        eos = [self.tokenizer.eos_token_id] if finished and self.tokenizer.eos_token_id is not None else []
        return ids + eos, "retokenized", finished
