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
"""

import os
import signal

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


async def _failing_generate(self, *args, **kwargs):
    _maybe_die()
    if _should_fail():
        raise RuntimeError(MESSAGE)
    return await _generate(self, *args, **kwargs)


HFRolloutServer.generate = _failing_generate
