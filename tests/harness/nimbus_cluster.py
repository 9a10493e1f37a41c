"""A cluster of real ``stratus nimbus`` processes on one real ZooKeeper, for the tests.

Each cluster lives under its own ``zookeeper.root``, so clusters of different tests never
meet; every process is killed when the test ends. ``auth`` (the client settings, e.g.
``client_auth(conf)``) is how the test reaches nimbuses that serve https or require a token.
``ha_mode="zkfc"`` starts nimbuses that never campaign: the test plays their failover
controllers (``nimbus.ha.mode``). ``command_prefix`` runs each nimbus through a launcher that
execs it (``DaemonProcess``), such as one that gives it a read-only view of a directory.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx

from stratus.api.overview import NimbusSelf
from stratus.api.records import ClusterSummary, LeaderInfo
from stratus.local.processes import NimbusProcess
from stratus.security.client_auth import NO_AUTH, ClientAuth
from stratus.zk.ports import pick_free_port
from tests.harness.zkfixtures import chroot_for, wait_until

SESSION_SECS = 2.0  # the shared server's tick is 100 ms: sessions of 200 ms and up


class NimbusCluster:
    """N nimbus processes; ``seeds`` for a client, ``leader()`` as the nimbuses see it."""

    def __init__(
        self,
        zk_connect: str,
        root: str,
        log_dir: Path,
        size: int,
        extra: Sequence[str],
        *,
        auth: ClientAuth = NO_AUTH,
        ha_mode: str = "self",
        command_prefix: Sequence[str] = (),
    ):
        self.root = root
        self.options = [
            "-c", f"zookeeper.servers={zk_connect}",
            "-c", f"zookeeper.root={root}",
            "-c", f"zookeeper.session.timeout.secs={SESSION_SECS}",
            "-c", f"nimbus.ha.mode={ha_mode}",
            *extra,
        ]  # fmt: skip
        self.nimbuses = [
            NimbusProcess(
                self.options,
                port=pick_free_port(),
                log_dir=log_dir,
                auth=auth,
                command_prefix=command_prefix,
            )
            for _ in range(size)
        ]
        self.http = httpx.Client(verify=auth.verify(), headers=auth.headers(), timeout=5.0)

    @property
    def seeds(self) -> list[str]:
        return [n.address for n in self.nimbuses]

    def start(self) -> None:
        for nimbus in self.nimbuses:
            nimbus.start()
        for nimbus in self.nimbuses:
            nimbus.wait_ready()

    def close(self) -> None:
        for nimbus in self.nimbuses:
            nimbus.signal(signal.SIGKILL)
            nimbus.kill()
        self.http.close()

    def by_address(self, address: str) -> NimbusProcess:
        return next(n for n in self.nimbuses if n.address == address)

    def summary(self, nimbus: NimbusProcess) -> ClusterSummary:
        response = self.http.get(f"{nimbus.url}/api/v1/cluster")
        response.raise_for_status()
        return ClusterSummary.model_validate_json(response.content)

    def leader_seen_by(self, nimbus: NimbusProcess) -> LeaderInfo | None:
        with contextlib.suppress(httpx.HTTPError):
            return LeaderInfo.model_validate_json(
                self.http.get(f"{nimbus.url}/api/v1/leader").content
            )
        return None

    def wait_for_agreed_leader(
        self,
        timeout: float = 20.0,
        *,
        not_: str | None = None,
        skip: Sequence[NimbusProcess] = (),
    ) -> str:
        """Wait until every running nimbus (but ``skip``) names one leader, other than ``not_``."""
        agreed: list[str] = []
        asked = [n for n in self.nimbuses if n not in skip]

        def agree() -> bool:
            seen = {
                info.address if info else None
                for info in (self.leader_seen_by(n) for n in asked if n.is_running())
            }
            if len(seen) == 1 and None not in seen and not_ not in seen:
                agreed[:] = [str(seen.pop())]
                return True
            return False

        wait_until(agree, timeout, "every nimbus to name the same leader")
        return agreed[0]

    def leads_a_term(self, nimbus: NimbusProcess) -> bool:
        """Whether ``nimbus`` says it leads (``GET /api/v1/nimbus``): its term has begun, so
        it answers leader-only calls. An elected nimbus is named leader by every nimbus a
        moment before: until its term begins it answers them 421."""
        with contextlib.suppress(httpx.HTTPError):
            answer = self.http.get(f"{nimbus.url}/api/v1/nimbus")
            return answer.is_success and NimbusSelf.model_validate_json(answer.content).is_leader
        return False


@contextlib.contextmanager
def nimbus_cluster(
    zk_connect: str,
    log_dir: Path,
    test_name: str,
    size: int = 3,
    extra: Sequence[str] = (),
    *,
    auth: ClientAuth = NO_AUTH,
    ha_mode: str = "self",
    command_prefix: Sequence[str] = (),
) -> Iterator[NimbusCluster]:
    root = chroot_for(test_name) + "/stratus"
    cluster = NimbusCluster(
        zk_connect,
        root,
        log_dir,
        size,
        extra,
        auth=auth,
        ha_mode=ha_mode,
        command_prefix=command_prefix,
    )
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()
