"""Shared-memory segments a run's processes leave behind in ``/dev/shm``, removed when the run ends.

Ray ends a run's actors by killing them, so they never unlink what they created there: vLLM's message queues
(``psm_*``, Python's ``multiprocessing.shared_memory``, about 400 MiB a run), the weight buckets of verl's
shared-memory weight sync (``verl_weights_*``, up to ``update_weights_bucket_megabytes``; a run that hung in the
sync left 2 GiB) and joblib's semaphores (``sem.loky-*``). :func:`remove_leftovers` unlinks the ones that appeared
during the run and that no live process still maps or holds open, so a second run on the same machine (another
run of the same suite, say) keeps its own.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

logger = logging.getLogger(__name__)

SHM = Path("/dev/shm")
# the names of the segments a run's processes create (vLLM, verl's weight sync, joblib)
PREFIXES = ("psm_", "verl_weights_", "sem.loky-")
# how long the killed processes of a run may take to let go of their segments
GRACE_S = 10.0


def snapshot(shm: Path = SHM) -> set[str]:
    """The names in ``shm`` now (empty where there is no such folder)."""
    try:
        return set(os.listdir(shm))
    except OSError:
        return set()


def in_use(shm: Path = SHM) -> set[str]:
    """The names in ``shm`` that a live process maps or holds open (read off ``/proc``)."""
    prefix, used = f"{shm}/", set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/maps") as maps:
                for line in maps:
                    path = line.rstrip("\n").split(maxsplit=5)[-1]
                    if path.startswith(prefix):
                        used.add(path[len(prefix) :].removesuffix(" (deleted)"))
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith(prefix):
                    used.add(target[len(prefix) :])
        except OSError:  # the process ended, or is not ours to read
            continue
    return used


def remove_leftovers(before: set[str], shm: Path = SHM, grace_s: float = GRACE_S) -> list[str]:
    """Unlink the segments named like :data:`PREFIXES` that appeared in ``shm`` since ``before`` and that no live
    process uses, waiting up to ``grace_s`` for killed processes to let go. Returns the names removed."""
    deadline, removed = time.monotonic() + grace_s, []
    while True:
        new = {name for name in snapshot(shm) - before if name.startswith(PREFIXES)}
        free = new - in_use(shm)
        for name in sorted(free):
            try:
                (shm / name).unlink()
                removed.append(name)
            except FileNotFoundError:
                continue
        if free == new or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    if removed:
        logger.info("removed %d shared-memory segments the run's processes left in %s", len(removed), shm)
    return removed
