"""A stratus cluster across hosts: on each host of ``NetnsHosts``, a ZooKeeper quorum member,
a nimbus and (when asked) a supervisor, every one a real process listening on its host's
address, so that cutting a host off is a real network partition. ``control`` names the hosts
that run a quorum member and a nimbus, when not every host does (the others then run
supervisors alone, as worker hosts of a deployment that keeps ZooKeeper off them).

Settings that every daemon gets, or only nimbuses, supervisors, the daemons of one host
(its certificate) or the test's clients, are given as mappings (``settings``,
``nimbus_settings``, ``supervisor_settings``, ``host_settings``, ``client_settings``;
``-c key=value`` for the daemons, the configuration of ``NimbusClient.from_config`` for the
clients): how a test switches on authentication, TLS and ZooKeeper ACLs (files they name are
the test's to write), without changing the harness; ``zookeeper_auth`` is what the quorum
members demand of their clients, and ``zookeeper_tls`` (one ``ServerTls`` per host: its
certificate names the host's address) makes them listen on TLS alone for other hosts and
talk to each other over TLS; ``zookeeper.servers`` then names the secure ports, and the
daemons' ``zookeeper.ssl.*`` settings are the test's to give. The harness itself reaches the
nimbuses with the client settings: https trusting ``client.tls.ca``, with the token.
``worker_users`` (host name -> users) walls the workers off: each host's supervisor runs its
workers as a pool of its own users (``supervisor.worker.run.as: pool``; the hosts share one
user database, and a pool kills every process of a user when its worker exits, so no two
hosts share a user), on ``python``, an interpreter those users may run
(``tests/harness/worker_users.py``). Every process is killed when the cluster closes::

    with NetnsHosts(["h1", "h2", "h3"]) as hosts, HostsCluster(hosts, tmp_path) as cluster:
        leader = cluster.wait_for_agreed_leader()
        cluster.add_supervisor("h2")

    with NetnsHosts(["c1", "c2", "c3", "w1"]) as hosts:
        with HostsCluster(hosts, tmp_path, control=["c1", "c2", "c3"]) as cluster:
            cluster.add_supervisor("w1")  # w1 runs this supervisor alone
"""

from __future__ import annotations

import contextlib
import shlex
import signal
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from stratus.api.records import ClusterSummary, LeaderInfo
from stratus.client import NimbusClient
from stratus.client_settings import client_auth
from stratus.config import config_from_mapping
from stratus.errors import StratusError
from stratus.local.processes import NimbusProcess, SupervisorProcess
from stratus.settings import zk_settings
from stratus.zk.auth import ServerAuth
from stratus.zk.ports import pick_free_port
from stratus.zk.server import Quorum, QuorumPeer, ZooKeeperServer
from stratus.zk.tls import ServerTls
from tests.harness.lifecycle import Started
from tests.harness.netns_hosts import Host, NetnsHosts
from tests.harness.zkfixtures import wait_until

ZK_TICK_MS = 100  # sessions from 200 ms, as the shared test server allows
SESSION_SECS = 2.0
ZK_START_SECS = 90.0
CLIENT_RETRY_SECS = 60.0
PROBE = {  # one nimbus asked once (the deadline ends before a retry): a cut-off host is no answer
    "client.retry.deadline.secs": 0.01,
    "client.request.timeout.secs": 2.0,
}
NIMBUS_PORT = 6627  # every host has its own ports: all nimbuses use the default


def options(settings: Mapping[str, object]) -> list[str]:
    """``-c key=value`` for each setting; a list as comma-separated values."""
    return [arg for key, value in settings.items() for arg in ("-c", f"{key}={_text(value)}")]


def _text(value: object) -> str:
    return ",".join(map(str, value)) if isinstance(value, list | tuple) else str(value)


def zookeeper_quorum(
    hosts: Iterable[Host],
    base_dir: Path,
    auth: ServerAuth | None = None,
    tls: Mapping[str, ServerTls] | None = None,
) -> dict[str, ZooKeeperServer]:
    """One quorum member per host of ``hosts`` (every host of a ``NetnsHosts``, or some),
    listening on the host's address, its JVM on the host; ``auth``: what each demands of its
    clients; ``tls``: each host's secure port and stores (its plain port then listens on the
    host's loopback alone)."""
    members = list(hosts)  # read twice: the peers, then a member per peer
    peers = tuple(
        QuorumPeer(
            server_id=index,
            client_port=pick_free_port(),
            peer_port=pick_free_port(),
            election_port=pick_free_port(),
            host=host.address,
        )
        for index, host in enumerate(members, start=1)
    )
    return {
        host.name: ZooKeeperServer(
            base_dir / f"zk-{host.name}",
            tick_time_ms=ZK_TICK_MS,
            quorum=Quorum(my_id=peer.server_id, peers=peers),
            command_prefix=host.command,
            auth=auth,
            tls=tls[host.name] if tls else None,
        )
        for host, peer in zip(members, peers, strict=True)
    }


def start_quorum(servers: Sequence[ZooKeeperServer], timeout: float = ZK_START_SECS) -> None:
    """Launch every member, then wait until each serves (a quorum formed)."""
    for server in servers:
        server.launch()
    for server in servers:
        server.wait_serving(timeout)


def control_hosts(hosts: NetnsHosts, names: Sequence[str] | None) -> list[Host]:
    """The hosts named ``names`` (None: every host), in that order: those of a quorum member
    and a nimbus each."""
    if names is None:
        return list(hosts)
    unknown = [name for name in names if name not in hosts.hosts]
    if not names or unknown or len(set(names)) != len(names):
        raise ValueError(f"control hosts must be distinct hosts of {list(hosts.hosts)}: {names}")
    return [hosts[name] for name in names]


class HostsCluster(Started):
    """ZooKeeper, nimbuses and supervisors on ``hosts``; see the module docstring.

    ``control``: the hosts that run a ZooKeeper member and a nimbus (None: every host); the
    quorum, the nimbuses, the seeds and the probes are theirs. Supervisors go on any host."""

    def __init__(  # noqa: PLR0913 keyword-only options
        self,
        hosts: NetnsHosts,
        workdir: Path,
        *,
        settings: Mapping[str, object] = {},
        nimbus_settings: Mapping[str, object] = {},
        supervisor_settings: Mapping[str, object] = {},
        host_settings: Mapping[str, Mapping[str, object]] = {},
        client_settings: Mapping[str, object] = {},
        zookeeper_auth: ServerAuth | None = None,
        zookeeper_tls: Mapping[str, ServerTls] | None = None,
        worker_users: Mapping[str, Sequence[str]] = {},
        python: str | None = None,
        control: Sequence[str] | None = None,
    ) -> None:
        shared = [user for users in worker_users.values() for user in users]
        if len(shared) != len(set(shared)):
            raise ValueError(f"hosts share a worker user: {dict(worker_users)}")
        self.hosts = hosts
        self.workdir = workdir
        self.control = control_hosts(hosts, control)
        self.zookeepers = zookeeper_quorum(self.control, workdir, zookeeper_auth, zookeeper_tls)
        servers = [zk.secure_connect_string or zk.connect_string for zk in self.zookeepers.values()]
        self.zk_connect = ",".join(servers)  # the secure ports, with TLS
        self.seeds = [f"{host.address}:{NIMBUS_PORT}" for host in self.control]
        common = {
            "zookeeper.servers": servers,
            "zookeeper.session.timeout.secs": SESSION_SECS,
            "nimbus.seeds": self.seeds,
            **settings,
        }
        # self-elected unless told: these hosts' tests are about partitions and security
        self._nimbus_settings = {**common, "nimbus.ha.mode": "self", **nimbus_settings}
        self._supervisor_settings = {**common, **supervisor_settings}
        self._host_settings = host_settings
        self._worker_users = worker_users
        self._python = python
        self._client_settings = {
            **common,
            "client.retry.deadline.secs": CLIENT_RETRY_SECS,
            **client_settings,
        }
        auth = client_auth(config_from_mapping(self._client_settings))
        self.nimbuses = {
            host.name: NimbusProcess(
                options({**self._nimbus_settings, **host_settings.get(host.name, {})}),
                port=NIMBUS_PORT,
                host=host.address,
                log_dir=workdir,
                command_prefix=host.command,
                auth=auth,
                code_port=None,  # one nimbus per host: the default port, as in production
            )
            for host in self.control
        }
        self.supervisors: dict[str, SupervisorProcess] = {}
        self._probes = {  # each asks its host's nimbus alone, once
            host.name: self._client([f"{host.address}:{NIMBUS_PORT}"], PROBE)
            for host in self.control
        }

    def start(self) -> None:
        members = list(self.zookeepers.values())
        start_quorum(members)
        if all(member.tls is None for member in members):
            # as its superuser, lock / and the root's quota (a quorum with TLS serves plain
            # clients on each host's own loopback alone, out of this process's reach)
            members[0].lock_down()
        for nimbus in self.nimbuses.values():
            nimbus.start()
        for nimbus in self.nimbuses.values():
            nimbus.wait_ready(60.0)

    def add_supervisor(self, name: str, *, slots: int = 2) -> SupervisorProcess:
        """Start a supervisor on host ``name`` (its id is the host's name) and wait for it."""
        host = self.hosts[name]
        settings = {**self._supervisor_settings, **self._host_settings.get(name, {})}
        if name in self._worker_users:
            settings["supervisor.worker.run.as"] = "pool"
            # checked against the pool's size as the configuration loads, before --slots
            settings["supervisor.slots"] = slots
            settings["supervisor.worker.users"] = list(self._worker_users[name])
        # the supervisor, hence its workers, on an interpreter its workers' users may run
        exec_python = f'shift; exec {shlex.quote(self._python or "")} "$@"'
        python = ["/bin/sh", "-c", exec_python, "sh"] if self._python else []
        supervisor = SupervisorProcess(
            [*options(settings), "-c", f"supervisor.host={host.address}"],
            id=name,
            slots=slots,
            log_dir=self.workdir,
            command_prefix=[*host.command, *python],
        )
        self.supervisors[name] = supervisor
        supervisor.start()
        supervisor.wait_ready(60.0)
        return supervisor

    def client(self, *, without: Sequence[str] = ()) -> NimbusClient:
        """A client whose seeds are the nimbuses of every host but ``without``."""
        cut = {self.hosts[name].address for name in without}
        seeds = [seed for seed in self.seeds if seed.rsplit(":", 1)[0] not in cut]
        return self._client(seeds)

    def _client(self, seeds: Sequence[str], settings: Mapping[str, object] = {}) -> NimbusClient:
        conf = {**self._client_settings, **settings, "nimbus.seeds": list(seeds)}
        return NimbusClient.from_config(config_from_mapping(conf))

    def zookeeper_tls(self) -> dict[str, Any]:
        """kazoo's options for the test's own ZooKeeper clients: the client settings' TLS
        (``zookeeper.ssl.*``; none without it)."""
        return zk_settings(config_from_mapping(self._client_settings)).tls.client_options()

    def leader_seen_by(self, name: str) -> LeaderInfo | None:
        """The leader as host ``name``'s nimbus names it, or None (no answer)."""
        with contextlib.suppress(StratusError):
            return self._probes[name].leader()
        return None

    def summary(self, name: str) -> ClusterSummary | None:
        """The cluster as host ``name``'s nimbus sees it, or None if it does not answer."""
        with contextlib.suppress(StratusError):
            return self._probes[name].cluster()
        return None

    def wait_for_agreed_leader(
        self, *, among: Sequence[str] | None = None, not_on: str | None = None, timeout: float = 60
    ) -> str:
        """The name of the host whose nimbus every nimbus of ``among`` names as leader."""
        asked = list(among or self.nimbuses)
        by_address = {nimbus.address: name for name, nimbus in self.nimbuses.items()}
        agreed: list[str] = []

        def agree() -> bool:
            seen = {info.address if info else None for info in map(self.leader_seen_by, asked)}
            if len(seen) != 1 or None in seen:
                return False
            leader = by_address.get(str(seen.pop()))
            if leader is None or leader == not_on:
                return False
            agreed[:] = [leader]
            return True

        wait_until(agree, timeout, f"the nimbuses of {asked} to name one leader (not {not_on})")
        return agreed[0]

    def close(self) -> None:
        for process in [*self.supervisors.values(), *self.nimbuses.values()]:
            process.signal(signal.SIGKILL)
            process.kill()
        for zookeeper in self.zookeepers.values():
            zookeeper.kill()
        for probe in self._probes.values():
            probe.close()
