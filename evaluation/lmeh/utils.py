"""Scoring for rg-verl's own lm-evaluation-harness tasks, ``gsm8k_rg_verl`` and ``math_algebra_rg_verl``
(``!function utils.<name>``). reasoning-gym's tasks score otherwise: ``gsm8k_cot_rg`` with lm-eval's regex
filters and ``exact_match``, ``llama_math_algebra`` with :mod:`rg_verl.evaluation.lmeh`.

Answers are read with rg-verl's own extraction (``rg_verl.reward.extract_answer``) and compared with
math-verify under a time limit (``rg_verl.reward.math_verify.math_equal``), as the RG-Math reward does.
Two metrics, side by side:

- ``exact_match``: the answer in our format, the last ``<answer>…</answer>`` block;
- ``exact_match_flexible``: that block, else the last ``\\boxed{…}``, else the last number.
"""

from __future__ import annotations

import re

from rg_verl.common.final_answer import gsm8k_reference, last_boxed
from rg_verl.reward import extract_answer
from rg_verl.reward.math_verify import math_equal

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def _flexible(response: str) -> str | None:
    answer = extract_answer(response) or last_boxed(response)
    if answer is None:
        numbers = _NUMBER.findall(response)
        answer = numbers[-1].replace(",", "") if numbers else None
    return answer


def _scores(response: str, reference: str) -> dict[str, float]:
    tagged = extract_answer(response)
    flexible = _flexible(response)
    return {
        "exact_match": math_equal(tagged, reference) if tagged is not None else 0.0,
        "exact_match_flexible": math_equal(flexible, reference) if flexible is not None else 0.0,
    }


def gsm8k_target(doc: dict) -> str:
    """The final number of a GSM8K solution (after ``####``)."""
    return gsm8k_reference(doc["answer"])


def process_gsm8k(doc: dict, results: list[str]) -> dict[str, float]:
    return _scores(results[0], gsm8k_target(doc))


def math_target(doc: dict) -> str:
    """The boxed answer of a MATH solution."""
    return last_boxed(doc["solution"]) or doc["solution"]


def process_math(doc: dict, results: list[str]) -> dict[str, float]:
    return _scores(results[0], math_target(doc))
