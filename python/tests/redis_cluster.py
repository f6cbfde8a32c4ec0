"""A real Redis Cluster for the remote-tier tests (the Python twin of
tests/common/redis_test_cluster.h): ``masters`` redis-server processes on free loopback ports
(127.0.0.1 only) in a temporary folder, cluster-enabled, no persistence, each with its own
cluster bus port; joined with ``redis-cli --cluster create ... --cluster-replicas 0
--cluster-yes``; ready once every node reports cluster_state:ok.

Cleanup: :meth:`RedisCluster.stop` SIGKILLs and reaps every server (the fixture calls it in a
finalizer, also when the test or the start failed); each server also gets PR_SET_PDEATHSIG, so a
test process that dies leaves no server behind. Every wait is bounded. Not thread-safe.
"""

from __future__ import annotations

import ctypes
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import List, Optional

START_TIMEOUT_S = 30.0
_PR_SET_PDEATHSIG = 1


def missing_server() -> Optional[str]:
    """Why the cluster cannot start here (None when redis-server and redis-cli are on PATH)."""
    for tool in ("redis-server", "redis-cli"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install redis-server redis-tools)"
    return None


def free_ports(n: int) -> List[int]:
    """n distinct loopback ports nothing listens on now (the kernel's picks, held together)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _die_with_parent() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


class RedisCluster:
    def __init__(self, folder: Path, masters: int = 3) -> None:
        self.folder = folder
        self.masters = masters
        self.ports: List[int] = []
        self._procs: List[subprocess.Popen] = []

    @property
    def seeds(self) -> str:
        """The store's remote_seeds: every master."""
        return "redis://" + ",".join(f"127.0.0.1:{p}" for p in self.ports)

    def start(self) -> None:
        ports = free_ports(2 * self.masters)
        self.ports = ports[: self.masters]
        for port, bus_port in zip(self.ports, ports[self.masters :]):
            node = self.folder / str(port)
            node.mkdir(parents=True)
            (node / "redis.conf").write_text(
                f"port {port}\nbind 127.0.0.1\nprotected-mode yes\ndir {node}\n"
                'appendonly no\nsave ""\ncluster-enabled yes\n'
                f"cluster-config-file nodes.conf\ncluster-port {bus_port}\n"
                "cluster-node-timeout 1000\n"
                f"logfile {node / 'redis.log'}\n"
            )
            self._procs.append(
                subprocess.Popen(
                    ["redis-server", str(node / "redis.conf")],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    preexec_fn=_die_with_parent,
                )
            )
        for port in self.ports:
            self._wait(port, ["ping"], "PONG")
        create = subprocess.run(
            ["redis-cli", "--cluster", "create"]
            + [f"127.0.0.1:{p}" for p in self.ports]
            + ["--cluster-replicas", "0", "--cluster-yes"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=START_TIMEOUT_S,
        )
        if create.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed: {create.stdout[-2000:]}")
        for port in self.ports:
            self._wait(port, ["cluster", "info"], "cluster_state:ok")

    def _wait(self, port: int, command: List[str], needle: str) -> None:
        give_up = time.monotonic() + START_TIMEOUT_S
        out = ""
        while time.monotonic() < give_up:
            for p in self._procs:
                if p.poll() is not None:
                    raise RuntimeError(f"redis-server exited with {p.returncode}: {self._logs()}")
            r = subprocess.run(
                ["redis-cli", "-h", "127.0.0.1", "-p", str(port)] + command,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=START_TIMEOUT_S,
            )
            out = r.stdout
            if needle in out:
                return
            time.sleep(0.05)
        raise RuntimeError(f"port {port}: no {needle!r} in time (last: {out!r}): {self._logs()}")

    def _logs(self) -> str:
        tails = []
        for log in sorted(self.folder.glob("*/redis.log")):
            tails.append(f"{log}: {log.read_text(errors='replace')[-1000:]}")
        return "\n".join(tails)

    def stop(self) -> None:
        for p in self._procs:
            if p.poll() is None:
                p.kill()
        for p in self._procs:
            p.wait()
        self._procs.clear()
