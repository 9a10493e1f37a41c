"""Real dummy HA services (``dummy_ha_service``), each beside a real ``stratus zkfc`` process.

The test steers each service through its control route and reads the shared events file
that every service appends its transitions to; ``conflicts()`` lists the times two services
were active at once (the test asserts there were none)::

    cluster = ZkfcCluster(zk_hosts, tmp_path, ["a", "b"], fencing="graceful, process")
    cluster.start()
    cluster.wait_active("a")
    cluster.control("a", healthy=False)
    cluster.wait_active("b")
"""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.harness.zkfixtures import wait_until

SESSION = 2.0
WAIT = 20.0  # generous: two cores shared by several test runs


def stratus_bin() -> str:
    return str(Path(sys.executable).parent / "stratus")


@dataclass
class Node:
    name: str
    service: subprocess.Popen[str]
    port: int
    zkfc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


class ZkfcCluster:
    """Services and their zkfcs; see the module docstring."""

    def __init__(
        self,
        zk_hosts: str,
        workdir: Path,
        names: list[str],
        *,
        fencing: str = "graceful, process",
        extra: dict[str, str] | None = None,
        service_args: list[str] | None = None,
        scheme: str = "http",
    ) -> None:
        self.zk_hosts = zk_hosts
        self.shared = workdir / "shared"
        self.shared.mkdir(exist_ok=True)
        self.logs = workdir / "logs"
        self.logs.mkdir(exist_ok=True)
        self.fencing = fencing
        self.extra = extra or {}
        self.names = names
        self.service_args = service_args or []
        self.scheme = scheme
        self.nodes: dict[str, Node] = {}
        self._http = httpx.Client(timeout=5.0, verify=False)

    # ----------------------------------------------------------------- processes

    def start(self) -> ZkfcCluster:
        for name in self.names:
            self.start_service(name)
        for name in self.names:
            self.start_zkfc(name)
        return self

    def start_service(self, name: str) -> Node:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.harness.dummy_ha_service",
                name,
                str(self.shared),
                *self.service_args,
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        (self.shared / f"{port}.pid").write_text(f"{proc.pid}\n")
        node = Node(name, proc, port)
        self.nodes[name] = node
        return node

    def zkfc_argv(self, node: Node) -> list[str]:
        conf = {
            "zookeeper.servers": self.zk_hosts,
            "zookeeper.session.timeout.secs": str(SESSION),
            "ha.zkfc.group": "svc",
            "ha.health.check.interval.secs": "0.1",
            "ha.health.rpc.timeout.secs": "1.0",
            "ha.health.max.backoff.secs": "0.5",
            "ha.zkfc.rejoin.delay.secs": "0.5",
            "ha.fencing.methods": self.fencing,
            "ha.fencing.timeout.secs": "5",
            "ha.fencing.graceful.timeout.secs": "1",
            "ha.zkfc.port": "0",
            **self.extra,
        }
        argv = [stratus_bin(), "zkfc", "--target", node.address]
        for key, value in conf.items():
            argv += ["-c", f"{key}={value}"]
        return argv

    def start_zkfc(self, name: str, *, open_files: int | None = None) -> None:
        """``open_files``: the soft open-files limit it starts with (default: this process's)."""
        node = self.nodes[name]
        log = (self.logs / f"zkfc-{name}.log").open("ab")
        argv = self.zkfc_argv(node)
        if open_files is not None:  # the shell lowers it, then becomes the zkfc (same pid)
            argv = ["sh", "-c", f'ulimit -Sn {open_files} && exec "$@"', "sh", *argv]
        node.zkfc = subprocess.Popen(argv, stderr=log, stdout=log)

    def kill_zkfc(self, name: str) -> None:
        zkfc = self.nodes[name].zkfc
        assert zkfc is not None
        zkfc.send_signal(signal.SIGKILL)
        zkfc.wait()

    def zkfc_log(self, name: str) -> str:
        return (self.logs / f"zkfc-{name}.log").read_text(errors="replace")

    def zkfc_endpoint(self, name: str) -> str:
        """The zkfc's own endpoint (host:port), from its start line."""
        found: list[str] = []

        def started() -> bool:
            found[:] = re.findall(r"event=zkfc_started .*endpoint=(\S+)", self.zkfc_log(name))
            return bool(found)

        wait_until(started, WAIT, f"{name}'s zkfc started")
        return found[-1]

    def stop(self) -> None:
        for node in self.nodes.values():
            if node.zkfc is not None and node.zkfc.poll() is None:
                node.zkfc.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    node.zkfc.wait(10)
                if node.zkfc.poll() is None:
                    node.zkfc.kill()
                    node.zkfc.wait()
        for node in self.nodes.values():
            with contextlib.suppress(ProcessLookupError):
                node.service.send_signal(signal.SIGCONT)
            node.service.kill()
            node.service.wait()
        self._http.close()

    # ----------------------------------------------------------------- the services

    def control(self, name: str, **behaviour: Any) -> None:
        url = f"{self.scheme}://{self.nodes[name].address}/control"
        self._http.post(url, json=behaviour).raise_for_status()

    def state(self, name: str) -> str | None:
        """The service's real state, None if it does not answer."""
        try:
            answer = self._http.get(
                f"{self.scheme}://{self.nodes[name].address}/control", timeout=1.0
            )
        except httpx.HTTPError:
            return None
        return str(answer.json()["state"])

    def actives(self) -> list[str]:
        return [name for name in self.nodes if self.state(name) == "active"]

    def wait_active(self, name: str, timeout: float = WAIT) -> None:
        wait_until(lambda: self.actives() == [name], timeout, f"{name} alone active")

    def events(self) -> list[tuple[str, str, str]]:
        """(event, service, epoch) in the order they happened."""
        path = self.shared / "events"
        if not path.exists():
            return []
        return [tuple(line.split()[:3]) for line in path.read_text().splitlines()]  # type: ignore[misc]

    def conflicts(self) -> list[tuple[str, str, str]]:
        return [event for event in self.events() if event[0] == "conflict"]

    def active_epochs(self) -> list[int]:
        return [int(epoch) for what, _, epoch in self.events() if what == "active"]
