"""A real multi-node Ray cluster on this machine, for the two-node smoke run (tests/e2e/test_smoke_run.py): a head and
worker nodes started with ``ray start``, each with its own logical CPUs and GPUs, stopped at the end even when the
test fails.

Every node gets its own ports and temp folder, so the cluster shares nothing with another Ray on the machine (the
other pytest worker's runs, a user's cluster); ``ray stop`` would stop those too, so :func:`stop` ends only the
processes of this cluster: those of each ``ray start``'s process group (``ray start`` leaves its daemons in it)
and everything they started. The cluster uses Ray's token authentication, as docs/multinode.md recommends.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil

RAY = str(Path(sys.executable).with_name("ray"))
START_TIMEOUT_S = 120
STOP_GRACE_S = 15
# ray start's ports that default to fixed numbers, which a second Ray on the machine would also take
FIXED_PORTS = ("--dashboard-agent-listen-port", "--ray-client-server-port", "--dashboard-port")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Cluster:
    """The nodes started so far: the process group of each ``ray start``, and the folder they keep their state in."""

    def __init__(self, root: Path):
        self.root = root
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.env = {"RAY_ADDRESS": self.address, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(16)}
        self.groups: list[int] = []

    def start_node(self, name: str, cpus: int, gpus: int) -> None:
        head = not self.groups
        where = ["--head", f"--port={self.port}"] if head else [f"--address={self.address}"]
        ports = [f"{option}={free_port()}" for option in (FIXED_PORTS if head else FIXED_PORTS[:1])]
        command = [RAY, "start", *where, "--node-ip-address=127.0.0.1", f"--num-cpus={cpus}", f"--num-gpus={gpus}",
                   "--object-store-memory=200000000", "--disable-usage-stats",
                   f"--temp-dir={self.root / name}", *ports]  # fmt: skip
        log = self.root / f"{name}.log"
        with open(log, "w") as out:
            child = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **self.env},
                                     start_new_session=True)  # fmt: skip
            self.groups.append(child.pid)  # the session leader's pid is its process group's id
            code = child.wait(timeout=START_TIMEOUT_S)
        assert code == 0, f"ray start of node {name} failed:\n{log.read_text()[-3000:]}"

    def processes(self) -> list[psutil.Process]:
        """This cluster's processes: those of its process groups and of its temp folder, and their descendants."""
        found: dict[int, psutil.Process] = {}
        for process in psutil.process_iter(["cmdline"]):
            with contextlib.suppress(psutil.Error, ProcessLookupError):
                ours = os.getpgid(process.pid) in self.groups or any(
                    str(self.root) in part for part in process.info["cmdline"] or []
                )
                if ours and process.pid != os.getpid():
                    for member in (process, *process.children(recursive=True)):
                        found[member.pid] = member
        return list(found.values())

    def stop(self) -> None:
        """End every process of the cluster: SIGTERM, then SIGKILL after :data:`STOP_GRACE_S`."""
        processes = self.processes()
        for process in processes:
            with contextlib.suppress(psutil.Error):
                process.send_signal(signal.SIGTERM)
        _, alive = psutil.wait_procs(processes, timeout=STOP_GRACE_S)
        for process in alive:
            with contextlib.suppress(psutil.Error):
                process.kill()
        psutil.wait_procs(alive, timeout=STOP_GRACE_S)


@contextlib.contextmanager
def local_cluster(nodes: dict[str, tuple[int, int]]) -> Iterator[Cluster]:
    """A cluster of ``nodes`` (name -> (logical CPUs, logical GPUs)), the first the head; stopped on the way out.

    Its folder is short (Ray's socket paths must stay under 108 bytes) and removed with it.
    """
    cluster = Cluster(Path(tempfile.mkdtemp(prefix="rgray", dir="/tmp")))
    try:
        for name, (cpus, gpus) in nodes.items():
            cluster.start_node(name, cpus, gpus)
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(cluster.root, ignore_errors=True)
