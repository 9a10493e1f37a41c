"""Hosts of a network for the tests: Linux network namespaces on a bridge, each its own address.

Each host is a network namespace with one veth interface, whose other end sits on a Linux
bridge in this machine's namespace; the bridge holds the network's first address, so the test
process itself reaches every host. A daemon started with ``host.command`` (``ip netns exec``)
is an ordinary process of this machine (same file system, same process ids) that sees only
its host's interfaces: it listens on its host's address, and loses the network when its host
is cut off (its veth set down) until it is healed::

    with NetnsHosts(["h1", "h2", "h3"]) as hosts:
        h1 = hosts["h1"]
        subprocess.run([*h1.command, "ip", "-brief", "addr"])   # eth0 10.213.N.2/24
        hosts.cut("h1")     # h1 reaches nobody, nobody reaches h1
        hosts.heal("h1")

Every name starts with ``stn`` and this process's id in hex, plus a run number, so parallel
and leftover runs never collide; :meth:`NetnsHosts.start` first removes what runs of dead
processes left (their namespaces, links and the processes still inside), and :meth:`close`
removes everything of its own, after a failure too. Needs root and ``ip`` (iproute2):
:func:`unavailable` says why hosts cannot be made here, for a test to skip with.
"""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from tests.harness.lifecycle import Started

TAG = "stn"  # every namespace and link of this harness starts with it
NETWORK = ipaddress.ip_network("10.213.0.0/16")  # private; one /24 of it per run
IP_TIMEOUT_SECS = 20.0
_NAME = re.compile(rf"^{TAG}(?P<pid>[0-9a-f]+)_")
_runs = itertools.count()


class NetnsError(RuntimeError):
    """An ``ip`` command of the harness failed; the message has the command and its output."""


@dataclass(frozen=True)
class Host:
    """One host: the test's name for it, its namespace, its address, its veth on the bridge."""

    name: str
    namespace: str
    address: str
    veth: str

    @property
    def command(self) -> list[str]:
        """The prefix that runs a command on this host (``ip netns exec`` execs it)."""
        return ["ip", "netns", "exec", self.namespace]


def unavailable() -> str | None:
    """Why network namespaces cannot be made here (for ``pytest.skip``), or None."""
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    if os.geteuid() != 0:
        return "network namespaces need root"
    probe = f"{TAG}{os.getpid():x}_probe"
    try:
        _ip("netns", "add", probe)
    except NetnsError as exc:
        return f"cannot create a network namespace: {exc}"
    with contextlib.suppress(NetnsError):
        _ip("netns", "del", probe)
    return None


class NetnsHosts(Started):
    """Hosts named by the test, on one bridge; see the module docstring."""

    def __init__(self, names: Sequence[str]) -> None:
        if not names or len(set(names)) != len(names) or len(names) > 200:
            raise ValueError(f"host names must be 1 to 200 distinct names, not {names!r}")
        self.run = f"{TAG}{os.getpid():x}_{next(_runs):x}"
        self.bridge = f"{self.run}b"
        if len(self.bridge) > 14:  # interface names have at most 15 characters
            raise ValueError(f"run name {self.run!r} is too long for interface names")
        self._names = list(names)
        self.hosts: dict[str, Host] = {}
        self.subnet: ipaddress.IPv4Network | None = None

    def __getitem__(self, name: str) -> Host:
        return self.hosts[name]

    def __iter__(self) -> Iterator[Host]:
        return iter(self.hosts.values())

    @property
    def gateway(self) -> str:
        """The bridge's address: where the test process is seen from the hosts."""
        assert self.subnet is not None, "start() first"
        return str(self.subnet.network_address + 1)

    def start(self) -> None:
        """Remove leftovers of dead runs, then create the bridge and every host (``with``
        closes what a failed start made)."""
        remove_leftovers()
        self.subnet = _free_subnet()
        prefix = self.subnet.prefixlen
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.gateway}/{prefix}", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for index, name in enumerate(self._names, start=1):
            host = Host(
                name=name,
                namespace=f"{self.run}_{name}",
                address=str(self.subnet.network_address + 1 + index),
                veth=f"{self.run}v{index}",
            )
            peer = f"{self.run}p{index}"
            _ip("netns", "add", host.namespace)
            self.hosts[name] = host
            _ip("link", "add", host.veth, "type", "veth", "peer", "name", peer)
            _ip("link", "set", peer, "netns", host.namespace)
            _ip("link", "set", host.veth, "master", self.bridge, "up")
            inside = ["-n", host.namespace]
            _ip(*inside, "link", "set", peer, "name", "eth0")
            _ip(*inside, "addr", "add", f"{host.address}/{prefix}", "dev", "eth0")
            _ip(*inside, "link", "set", "eth0", "up")
            _ip(*inside, "link", "set", "lo", "up")

    def popen(self, name: str, argv: Sequence[str], **popen: Any) -> subprocess.Popen[bytes]:
        """Start ``argv`` on host ``name``: a real process with the host's network."""
        return subprocess.Popen([*self.hosts[name].command, *argv], **popen)

    def cut(self, name: str) -> None:
        """Take host ``name`` off the network: its veth on the bridge goes down."""
        _ip("link", "set", self.hosts[name].veth, "down")

    def heal(self, name: str) -> None:
        """Put host ``name`` back on the network."""
        _ip("link", "set", self.hosts[name].veth, "up")

    def pids(self, name: str) -> list[int]:
        """Every process running on host ``name`` (its namespace's), e.g. to kill the host."""
        return [int(pid) for pid in _ip("netns", "pids", self.hosts[name].namespace).split()]

    def close(self) -> None:
        """Kill what still runs on the hosts, remove them and the bridge; idempotent."""
        for host in self.hosts.values():
            _remove_namespace(host.namespace)
            _remove_link(host.veth)
        _remove_link(self.bridge)
        self.hosts.clear()


def remove_leftovers() -> list[str]:
    """Remove the namespaces and links of runs whose process is gone; their names."""
    removed = []
    for namespace in _ip("netns", "list").split():
        if _dead_run(namespace):
            _remove_namespace(namespace)
            removed.append(namespace)
    for line in _ip("-o", "link", "show").splitlines():
        link = line.split(":")[1].strip().split("@")[0] if ":" in line else ""
        if _dead_run(link):
            _remove_link(link)
            removed.append(link)
    return removed


def _dead_run(name: str) -> bool:
    match = _NAME.match(name)
    if match is None:
        return False
    pid = int(match["pid"], 16)
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _remove_namespace(namespace: str) -> None:
    """SIGKILL every process still in ``namespace``, then delete it; quiet if it is gone."""
    with contextlib.suppress(NetnsError):
        for pid in _ip("netns", "pids", namespace).split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
    with contextlib.suppress(NetnsError):
        _ip("netns", "del", namespace)


def _remove_link(link: str) -> None:
    with contextlib.suppress(NetnsError):
        _ip("link", "del", link)


def _free_subnet() -> ipaddress.IPv4Network:
    """A /24 of ``NETWORK`` that no address of this machine is in, starting at a place
    that depends on the process id, so that parallel runs rarely probe the same one."""
    used: set[ipaddress.IPv4Network | ipaddress.IPv6Network] = {
        ipaddress.ip_interface(field).network
        for line in _ip("-o", "-4", "addr", "show").splitlines()
        for field in line.split()[3:4]
    }
    # 10.213.0.0/24 is left out
    subnets = [ipaddress.IPv4Network(net) for net in NETWORK.subnets(new_prefix=24)][1:]
    start = os.getpid() % len(subnets)
    for subnet in subnets[start:] + subnets[:start]:
        if not any(subnet.overlaps(other) for other in used):
            return subnet
    raise NetnsError(f"no free /24 left in {NETWORK}: remove leftover bridges")


def _ip(*arguments: str) -> str:
    """Run ``ip`` with ``arguments``; its output, or NetnsError with its error output."""
    command = ["ip", *arguments]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=IP_TIMEOUT_SECS, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NetnsError(f"{' '.join(command)}: {exc}") from None
    if done.returncode != 0:
        raise NetnsError(f"{' '.join(command)}: {done.stderr.strip() or done.returncode}")
    return done.stdout
