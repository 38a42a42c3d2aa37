"""Shared-memory segments a run's killed processes leave in ``/dev/shm``, removed when the run ends (docs/cpu.md)."""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Iterable
from pathlib import Path

logger = logging.getLogger(__name__)

SHM = Path("/dev/shm")

PREFIXES = ("psm_", "verl_weights_")
# joblib's named semaphores carry the pid of the process that made them
LOKY = re.compile(r"^sem\.loky-(\d+)-")

GRACE_S = 10.0


def snapshot(shm: Path = SHM) -> set[str]:
    """The names in ``shm`` now (empty where there is no such folder)."""
    try:
        return set(os.listdir(shm))
    except OSError:
        return set()


def used_by(pids: Iterable[int], shm: Path = SHM) -> set[str]:
    """The names in ``shm`` that the processes ``pids`` map or hold open, read off ``/proc`` where it can be."""
    prefix, used = f"{shm}/", set()
    for pid in pids:
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
        except OSError:
            continue
    return used


def in_use(shm: Path = SHM) -> set[str]:
    """The names in ``shm`` that any live process on the machine maps or holds open."""
    try:
        pids = [int(pid) for pid in os.listdir("/proc") if pid.isdigit()]
    except OSError:
        return set()
    return used_by(pids, shm)


def run_processes() -> set[int]:
    """This process and its descendants now; a failure is logged and gives none (it must not hide how a run ended)."""
    import psutil

    try:
        me = psutil.Process()
        return {me.pid, *(child.pid for child in me.children(recursive=True))}
    except psutil.Error as error:
        logger.warning("could not list the run's processes to find its shared-memory segments: %s", error)
        return set()


def owned(before: set[str], shm: Path = SHM, pids: set[int] | None = None) -> set[str]:
    """The run's new segments since ``before``: :data:`PREFIXES` ones that ``pids`` use, joblib's that they made."""
    new = snapshot(shm) - before
    if not new:
        return set()
    pids = run_processes() if pids is None else pids
    made = {name for name in new if (m := LOKY.match(name)) and int(m.group(1)) in pids}
    return made | ({name for name in new if name.startswith(PREFIXES)} & used_by(pids, shm))


def remove_leftovers(ours: set[str], shm: Path = SHM, grace_s: float = GRACE_S) -> list[str]:
    """Unlink ``ours`` still in ``shm`` once no live process uses them (up to ``grace_s``); returns those removed."""
    deadline, removed, left = time.monotonic() + grace_s, [], set(ours)
    while left:
        left &= snapshot(shm)
        free = left - in_use(shm)
        for name in sorted(free):
            try:
                (shm / name).unlink()
                removed.append(name)
            except OSError:  # gone already, or not ours to remove: left as it is
                pass
        left -= free
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    if removed:
        logger.info("removed %d shared-memory segments the run's processes left in %s", len(removed), shm)
    return removed


class RunSegments:
    """A context that removes the segments its processes left, looking every ``every_s`` (they may end before)."""

    def __init__(self, shm: Path = SHM, every_s: float = 5.0, grace_s: float = GRACE_S):
        self.shm, self.every_s, self.grace_s = shm, every_s, grace_s
        self.seen: set[str] = set()
        self.pids: set[int] = set()
        self._stop = threading.Event()

    def look(self) -> None:
        """Note the run's segments now: before its processes are killed, which then hold nothing."""
        self.pids |= run_processes()
        self.seen |= owned(self.before, self.shm, self.pids)

    def _watch(self) -> None:
        while not self._stop.wait(self.every_s):
            self.look()

    def __enter__(self) -> RunSegments:
        self.before = snapshot(self.shm)
        self._thread = threading.Thread(target=self._watch, name="rg-verl-shm", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.look()
        remove_leftovers(self.seen, self.shm, self.grace_s)
