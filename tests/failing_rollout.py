"""Test-only verl plugin: an ``hf`` rollout server whose requests fail on demand.

tests/e2e/test_faults.py loads it into every Ray process (``PYTHONPATH=<repo>/tests
VERL_USE_EXTERNAL_MODULES=...,failing_rollout``, as tests/negated_grpo.py is loaded). It wraps
``HFRolloutServer.generate``; ``RG_VERL_FAIL_ROLLOUTS`` says which requests raise:

- a file path: the first request to create that file raises, every other one generates (exactly one
  failure across every process of the run);
- ``always``: every request raises.

``RG_VERL_KILL_ROLLOUT_AT`` (``<request count>:<file path>``) kills the server's own process with SIGKILL, as the
kernel's out-of-memory killer would, when it receives that request (counted from 1), unless the file exists. The
file is written first, with the server's pid, so a resumed run is not killed again.

``RG_VERL_HOSTILE_ROLLOUTS`` (a count) answers that many first requests with hostile text instead of the model's
(tokenized with the tokenizer at ``RG_VERL_TINY_MODEL``, cut to the request's token budget): a sympy power tower in
an answer tag to an integration question, whose scorer the reward must cut off, and tag soups to the rest.
"""

import functools
import itertools
import os
import signal

from transformers import AutoTokenizer
from verl.workers.rollout.replica import TokenOutput

from rg_verl.hf_rollout.server import HFRolloutServer

MESSAGE = "test rollout failure"
_generate = HFRolloutServer.generate


def _should_fail() -> bool:
    mode = os.environ.get("RG_VERL_FAIL_ROLLOUTS")
    if not mode:
        return False
    if mode == "always":
        return True
    try:
        os.close(os.open(mode, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


_requests = 0


def _maybe_die() -> None:
    global _requests
    setting = os.environ.get("RG_VERL_KILL_ROLLOUT_AT")
    if not setting:
        return
    count, marker = setting.split(":", 1)
    _requests += 1
    if _requests == int(count) and not os.path.exists(marker):
        with open(marker, "w") as record:
            record.write(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)


TOWER = "<answer>9**9**9**9</answer>"
SOUPS = itertools.cycle(["<answer>" * 40, "<answer><think></answer>" * 20, "<" * 200, "</answer>" * 40])
_hostile = 0


@functools.cache
def _tokenizer():
    return AutoTokenizer.from_pretrained(os.environ["RG_VERL_TINY_MODEL"])


def _hostile_answer(self, prompt_ids, sampling_params) -> TokenOutput | None:
    global _hostile
    if _hostile >= int(os.environ.get("RG_VERL_HOSTILE_ROLLOUTS", "0")):
        return None
    _hostile += 1
    text = TOWER if "∫" in _tokenizer().decode(prompt_ids) else next(SOUPS)  # every integration question has one
    budget = min(int(sampling_params.get("max_tokens", self.response_length)), self.response_length)
    tokens = _tokenizer()(text, add_special_tokens=False)["input_ids"][:budget]
    served = {"global_steps": self.global_steps, "weight_version": self.weight_version}
    log_probs = [0.0] * len(tokens) if sampling_params.get("logprobs") else None
    return TokenOutput(token_ids=tokens, log_probs=log_probs, stop_reason="completed", extra_fields=served)


async def _failing_generate(self, prompt_ids, sampling_params, *args, **kwargs):
    _maybe_die()
    if _should_fail():
        raise RuntimeError(MESSAGE)
    hostile = _hostile_answer(self, prompt_ids, sampling_params)
    if hostile is not None:
        return hostile
    return await _generate(self, prompt_ids, sampling_params, *args, **kwargs)


HFRolloutServer.generate = _failing_generate
