"""Reward for reasoning-gym items (the dataset's scorer) and file math items (math-verify's equivalence)."""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable
from typing import Any, NamedTuple

from reasoning_gym.factory import get_score_answer_fn

from rg_verl.common.chat_template import load_tokenizer, resolve_response_prefix
from rg_verl.common.names import FILE_PREFIX, MODES, RG_PREFIX, parse_data_source
from rg_verl.common.schema import plain
from rg_verl.reward.config import RewardConfig
from rg_verl.reward.episode import EPISODE_KEY, episode_values, is_episode
from rg_verl.reward.extraction import response_answer
from rg_verl.reward.math_verify import math_equal_status
from rg_verl.reward.sympy_guard import SYMPY_PARSED, is_plain_expression
from rg_verl.reward.terms import TERMS, Response, clamp_unit, revised_answers, self_correction_term
from rg_verl.reward.time_limit import Status, call_bounded

__all__ = ["compute_score", "count_tokens", "reward_config", "score_with"]

logger = logging.getLogger(__name__)

MAX_EARLIER_ANSWERS = 3  # earlier answers of a response scored for self-correction
SCORE_TIMEOUT_S = 0.9


@functools.cache
def _scorer(name: str) -> Callable[[str | None, dict], float]:
    return get_score_answer_fn(name)


def _as_tuples(value: Any) -> Any:
    return tuple(_as_tuples(v) for v in value) if isinstance(value, list) else value


# entries are stored as JSON (tuples become lists); these scorers compare metadata against tuples
_TUPLE_FIELDS = {"arc_agi": ("input", "output"), "rearc": ("input", "output")}


def _entry(name: str, extra_info: Any, ground_truth: Any) -> dict:
    entry = extra_info.get("entry") if isinstance(extra_info, dict) else None
    if isinstance(entry, str):
        try:
            entry = json.loads(entry)
        except ValueError:
            entry = None
    if not isinstance(entry, dict):
        logger.warning("extra_info has no reasoning-gym 'entry'; scoring against ground_truth only")
        entry = {"question": "", "answer": "" if ground_truth is None else str(ground_truth), "metadata": {}}
    metadata = entry.get("metadata")
    if name in _TUPLE_FIELDS and isinstance(metadata, dict):
        fixed = {k: _as_tuples(metadata[k]) for k in _TUPLE_FIELDS[name] if k in metadata}
        entry = {**entry, "metadata": {**metadata, **fixed}}
    return entry


# a longer response (characters per allowed token) fills its budget and is not tokenised
MAX_CHARS_PER_TOKEN = 32


_tokenizer = load_tokenizer


def count_tokens(texts: list[str], tokenizer_path: str, max_tokens: int) -> list[int]:
    """Tokens in each of ``texts``, in one batched tokenizer call (capped cheaply for absurdly long text)."""
    long = [len(text) > max_tokens * MAX_CHARS_PER_TOKEN for text in texts]
    short = [text for text, too_long in zip(texts, long, strict=True) if not too_long]
    counts = iter(map(len, _tokenizer(tokenizer_path)(short, add_special_tokens=False)["input_ids"]) if short else ())
    return [max_tokens if too_long else next(counts) for too_long in long]


def score_in_worker(name: str, answer: str, entry: dict) -> float:
    """Runs a reasoning-gym scorer; called inside a bounded worker process."""
    return float(_scorer(name)(answer, entry))


def _correctness(name: str, answer: str | None, entry: dict, by_math: bool = False) -> tuple[float, bool]:
    """(score in [0, 1], whether scoring failed) of ``answer``; sympy-parsing scorers run in a killable worker."""
    if answer is None:
        return 0.0, False
    if by_math:
        score, status = math_equal_status(answer, str(entry.get("answer", "")), timeout=SCORE_TIMEOUT_S)
        return score, status != Status.OK
    if name in SYMPY_PARSED:
        if not is_plain_expression(answer):
            return 0.0, False
        score, status = call_bounded(score_in_worker, name, answer, entry, timeout=SCORE_TIMEOUT_S, default=0.0)
        if status != Status.OK:
            logger.warning("reasoning-gym scorer for %r: %s; scoring 0.0", name, status.value)
            return 0.0, True
    else:
        try:
            score = float(_scorer(name)(answer, entry))
        except Exception as e:  # a scorer bug must never crash training
            logger.warning("reasoning-gym scorer for %r raised %r; scoring 0.0", name, e)
            return 0.0, True
    return clamp_unit(score), False


# verl merges the same reward kwargs into every call (verl/trainer/ppo/reward.py, get_custom_reward_fn):
# each distinct value is checked once; repr keeps apart values that compare equal (True == 1)
_CHECKED: dict[str, RewardConfig] = {}


def reward_config(**given: Any) -> RewardConfig:
    """The reward kwargs that are not None, checked by :class:`~rg_verl.reward.config.RewardConfig`.

    >>> reward_config(mode="strict", terms={"format": 0.5}).terms
    {'format': 0.5}
    """
    given = {name: value for name, value in given.items() if value is not None}
    key = repr(given)
    if key not in _CHECKED:  # verl's values are OmegaConf nodes: checked as the plain values a YAML file gives
        _CHECKED[key] = RewardConfig.from_section({name: plain(value) for name, value in given.items()})
    return _CHECKED[key]



class _Verdict(NamedTuple):
    answer: str | None
    correctness: float
    failed: bool


# (correctness, whether scoring failed) of an answer to the item at hand
_Score = Callable[[str | None], tuple[float, bool]]


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict | None = None,
    mode: str | None = None,
    terms: dict[str, float] | None = None,
    tokenizer_path: str | None = None,
    max_response_length: int | None = None,
    math_datasets: list[str] | tuple[str, ...] | None = None,
    reference_terms: dict[str, Any] | None = None,
    response_tokens: int | None = None,
    gates: dict[str, str] | None = None,
    response_prefix: str | None = None,
    chat_template_kwargs: dict[str, Any] | None = None,
    **kwargs: Any,
) -> dict[str, float | str]:
    """Scores a response: its answer's correctness plus weighted terms; returns the values ``docs/reward.md`` lists.

    Kwargs that are None take :class:`~rg_verl.reward.config.RewardConfig`'s defaults; ``response_tokens`` is a count
    from :func:`count_tokens`, else counted here. A ValueError names an unknown data source or a bad kwarg.
    """
    config = reward_config(
        mode=mode, terms=terms, tokenizer_path=tokenizer_path,
        max_response_length=max_response_length, math_datasets=math_datasets, reference_terms=reference_terms,
        gates=gates, response_prefix=response_prefix, chat_template_kwargs=chat_template_kwargs,
    )  # fmt: skip
    return score_with(config, data_source, solution_str, ground_truth, extra_info, response_tokens)


def score_with(
    config: RewardConfig,
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict | None = None,
    response_tokens: int | None = None,
) -> dict[str, float | str]:
    """:func:`compute_score` under settings :func:`reward_config` already checked (for a caller scoring many)."""
    name, from_file = _dataset(data_source)
    written = solution_str if isinstance(solution_str, str) else ""
    episode = extra_info[EPISODE_KEY] if is_episode(extra_info) else None
    if episode is not None:  # a "wrong, try again" episode (rg_verl.retry): its last try is the answer
        written, response_tokens = str(episode["final_response"]), None
    # the turn as the model sees it: a thinking template's opening <think>, then what the model wrote
    prefix = resolve_response_prefix(config.response_prefix, config.tokenizer_path, config.chat_template_kwargs)
    text = prefix + written
    entry = _entry(name, extra_info, ground_truth)
    score = functools.partial(_correctness, name, entry=entry, by_math=from_file or name in config.math_datasets)
    verdicts = _verdicts(text, data_source, score)
    response_tokens = _token_counts(written, config, response_tokens)[0]  # the model's tokens, not the template's
    response = _response(text, verdicts, config, score, response_tokens, prefixed=bool(prefix))
    result = _result(verdicts, config.mode, response, config.terms, config.gates)
    if episode is not None:
        values = episode_values(episode)
        result["score"] *= values.pop("discount")
        result.update(values)
    return result


def _dataset(data_source: Any) -> tuple[str, bool]:
    """(dataset name, whether the item comes from a file) of a supported ``data_source``."""
    parsed = parse_data_source(data_source)
    if parsed is None:
        raise ValueError(
            f"Unsupported data_source {data_source!r}: expected '{RG_PREFIX}<dataset name>' "
            f"or '{FILE_PREFIX}<name>'"
        )
    name, from_file = parsed
    if not from_file:
        try:
            _scorer(name)
        except Exception:  # reasoning-gym raises ValueError, or asserts (composite)
            raise ValueError(
                f"Unsupported data_source {data_source!r}: unknown reasoning-gym dataset {name!r}"
            ) from None
    return name, from_file


def _verdicts(text: str, data_source: str, score: _Score) -> dict[str, _Verdict]:
    """The answer and its score under each mode of :data:`~rg_verl.common.names.MODES`; one scoring if they agree."""
    verdicts: dict[str, _Verdict] = {}
    for mode in MODES:
        answer = response_answer(text, data_source, strict=mode == "strict")
        same = [verdict for verdict in verdicts.values() if verdict.answer == answer]
        verdicts[mode] = same[0] if same else _Verdict(answer, *score(answer))
    return verdicts


def _earlier_answers_correct(text: str, score: _Score) -> tuple[bool, ...]:
    """For the last :data:`MAX_EARLIER_ANSWERS` earlier answers that differ from the final one: correct?"""
    answers = revised_answers(text)
    earlier = [answer for answer in answers[:-1] if answer != answers[-1]][-MAX_EARLIER_ANSWERS:]
    return tuple(score(answer)[0] >= 1.0 for answer in earlier)


def _token_counts(text: str, config: RewardConfig, counted: int | None) -> tuple[int, int]:
    """(response tokens, token budget), or (0, 0) without a tokenizer and a budget; ``counted`` where given."""
    if not (config.tokenizer_path and config.max_response_length):
        return 0, 0
    max_tokens = int(config.max_response_length)
    if counted is None:
        [counted] = count_tokens([text], config.tokenizer_path, max_tokens)
    return counted, max_tokens


def _response(
    text: str,
    verdicts: dict[str, _Verdict],
    config: RewardConfig,
    score: _Score,
    counted: int | None,
    prefixed: bool = False,
) -> Response:
    """What the terms look at; a ``prefixed`` text already holds the template's ``<think>`` (no preappend again)."""
    num_tokens, max_tokens = _token_counts(text, config, counted)
    return Response(
        text=text,
        correctness=verdicts[config.mode].correctness,
        format_ok=verdicts["strict"].answer is not None,
        num_tokens=num_tokens,
        max_tokens=max_tokens,
        earlier_answers_correct=_earlier_answers_correct(text, score),
        max_output_length=config.reference_terms.max_output_length,
        preappend_thinking_token=config.reference_terms.preappend_thinking_token and not prefixed,
    )


def _result(
    verdicts: dict[str, _Verdict], mode: str, response: Response, weights: dict[str, float], gates: dict[str, str]
) -> dict[str, float | str]:
    """The values :func:`compute_score` returns, the weighted terms that their gates let through added to ``score``."""
    result = {
        "score": response.correctness,
        "correct_strict": verdicts["strict"].correctness,
        "correct_lenient": verdicts["lenient"].correctness,
        "accuracy": float(response.correctness >= 1.0),
        "format_ok": float(response.format_ok),
        "answer_found": float(verdicts[mode].answer is not None),
        "revised": float(bool(response.earlier_answers_correct)),
        "self_corrected": self_correction_term(response),
        "scoring_failed": float(any(verdict.failed for verdict in verdicts.values())),
        "pred": verdicts[mode].answer or "",
    }
    if response.max_tokens:
        result["response_tokens"] = float(response.num_tokens)
        # a response that stopped on its own is shorter: its end-of-sequence token is in the budget, not the text
        result["truncated"] = float(response.num_tokens >= response.max_tokens)
    outcome = "correct" if result["accuracy"] else "incorrect"
    for term, weight in weights.items():
        if weight != 0.0:
            value = TERMS[term](response) if gates.get(term, outcome) == outcome else 0.0
            result[f"term/{term}"] = value
            result["score"] += weight * value
    return result
