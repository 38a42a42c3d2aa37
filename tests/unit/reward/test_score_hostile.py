"""A whole training step of hostile completions (issue: output is untrusted, at scale): 512 responses built from
the adversarial cases of the other reward tests, scored concurrently as verl's reward loop scores a step (each
response in the default thread pool, ``loop.run_in_executor``), finish within a deadline, score 0, count the
scorers that had to be cut off in ``scoring_failed``, and leave the scoring workers fit: the next step's right
answers score 1."""

from __future__ import annotations

import asyncio
import itertools

import reasoning_gym

from rg_verl.reward import compute_score
from tests.helpers import within
from tests.unit.reward.test_extraction import HOSTILE

STEP = 512
# the whole hostile step: its few scorer timeouts (0.9 s each) run on a couple of worker processes at a time,
# after a cold start of the workers; far more than this is a hang
STEP_DEADLINE_S = 300
TOWER = "<answer>9**9**9**9</answer>"  # reaches sympy's parser as plain arithmetic, then is cut off
CODE = ["__import__('os').system('touch /tmp/rg_verl_pwned')", "x.__class__.__mro__", "eval(chr(49))"]


def entry(name: str, index: int = 0) -> dict:
    return reasoning_gym.create_dataset(name, seed=1, size=64)[index]


def hostile_step() -> list[tuple[str, str, dict, bool]]:
    """(dataset, response, entry, whether its scorer must be cut off), STEP of them: 32 power towers to
    sympy-parsed scorers, code for them, 100 kB tag soups, each kind in turn."""
    kinds = itertools.cycle(
        [("chain_sum", text, False) for text in HOSTILE]
        + [("polynomial_multiplication", f"<answer>{code}</answer>", False) for code in CODE]
    )
    step = [("intermediate_integration", TOWER, True) for _ in range(32)]
    step += [next(kinds) for _ in range(STEP - len(step))]
    return [(name, text, entry(name), cut_off) for name, text, cut_off in step]


def score_step(items: list[tuple[str, str, dict]]) -> list[dict]:
    async def step():
        loop = asyncio.get_running_loop()
        return await asyncio.gather(*(
            loop.run_in_executor(None, compute_score, f"reasoning_gym/{name}", text, e["answer"], {"entry": e})
            for name, text, e in items
        ))  # fmt: skip

    return within(STEP_DEADLINE_S, asyncio.run, step())


def test_a_step_of_hostile_completions_scores_zero_counts_the_cut_offs_and_the_next_step_is_normal():
    step = hostile_step()
    results = score_step([(name, text, e) for name, text, e, _ in step])
    assert len(results) == STEP and all(r["score"] == 0.0 for r in results)
    assert [r["scoring_failed"] for r in results] == [float(cut_off) for *_, cut_off in step]
    assert sum(r["scoring_failed"] for r in results) == 32
    right = [("chain_sum", f"<answer>{e['answer']}</answer>", e) for e in (entry("chain_sum", i) for i in range(64))]
    after = score_step(right)
    assert all(r["score"] == 1.0 and r["scoring_failed"] == 0.0 for r in after)
