"""Nimbus processes that answer only to credentials, for the tests of authentication.

A token file with one token of each role (and the nimbuses' own, ``PEER``), and a cluster of
real ``stratus nimbus`` processes that a test reaches with an admin's ``httpx.Client``
(https when the test gives it TLS)::

    with secure_cluster(zk, log_dir, "name", extra=[...], http=client) as cluster:
        cluster.leader()          # the NimbusProcess every nimbus names
"""

from __future__ import annotations

import contextlib
import functools
import signal
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx

from stratus.api.records import LeaderInfo
from stratus.local.processes import NimbusProcess
from stratus.zk.ports import pick_free_port
from tests.nimbus_cluster import SESSION_SECS
from tests.zkfixtures import chroot_for, wait_until

ADMIN = "admin-token-6f1d2c9a8b7e4f30"
SUBMIT = "submit-token-0c4e9b1a2d3f5e67"
READ = "read-token-9a8b7c6d5e4f3a21"
PEER = "peer-token-1b2c3d4e5f6a7b8c"  # the nimbuses' own, to fetch code from each other
TOKENS = f"""\
admin  token {ADMIN}
submit token {SUBMIT}
read   token {READ}
read   token {PEER}
submit cn    ci-runner
"""
WAIT_SECS = 30.0


def bearer(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def token_file(directory: Path) -> Path:
    path = directory / "tokens"
    path.write_text(TOKENS)
    path.chmod(0o600)
    return path


class SecureCluster:
    """Nimbus processes that answer only to credentials; ``http`` is an admin's client."""

    def __init__(
        self,
        zk_connect: str,
        log_dir: Path,
        name: str,
        *,
        size: int,
        extra: Sequence[str],
        http: httpx.Client,
        scheme: str,
    ) -> None:
        self.root = chroot_for(name) + "/stratus"
        options = [
            "-c", f"zookeeper.servers={zk_connect}",
            "-c", f"zookeeper.root={self.root}",
            "-c", f"zookeeper.session.timeout.secs={SESSION_SECS}",
            "-c", "nimbus.code.sync.freq.secs=1",
            *extra,
        ]  # fmt: skip
        self.nimbuses = [
            NimbusProcess(options, port=pick_free_port(), log_dir=log_dir) for _ in range(size)
        ]
        self.http = http
        self.scheme = scheme

    def url(self, nimbus: NimbusProcess) -> str:
        return f"{self.scheme}://{nimbus.address}"

    @property
    def seeds(self) -> list[str]:
        return [n.address for n in self.nimbuses]

    def start(self) -> None:
        for nimbus in self.nimbuses:
            nimbus.start()
        for nimbus in self.nimbuses:
            wait_until(functools.partial(self._answers, nimbus), WAIT_SECS, "a nimbus to answer")

    def _answers(self, nimbus: NimbusProcess) -> bool:
        assert nimbus.is_running(), nimbus.log_tail()
        with contextlib.suppress(httpx.HTTPError):
            return self.http.get(f"{self.url(nimbus)}/api/v1/leader").status_code == 200
        return False

    def leader(self) -> NimbusProcess:
        """The nimbus every nimbus names as leader, once they agree."""
        agreed: list[str] = []

        def agree() -> bool:
            seen = {self._leader_seen_by(n) for n in self.nimbuses}
            if len(seen) == 1 and None not in seen:
                agreed[:] = [str(seen.pop())]
                return True
            return False

        wait_until(agree, WAIT_SECS, "every nimbus to name the same leader")
        return next(n for n in self.nimbuses if n.address == agreed[0])

    def standby(self) -> NimbusProcess:
        leader = self.leader()
        return next(n for n in self.nimbuses if n is not leader)

    def _leader_seen_by(self, nimbus: NimbusProcess) -> str | None:
        response = self.http.get(f"{self.url(nimbus)}/api/v1/leader")
        return LeaderInfo.model_validate_json(response.content).address

    def close(self) -> None:
        for nimbus in self.nimbuses:
            nimbus.signal(signal.SIGKILL)
            nimbus.kill()


@contextlib.contextmanager
def secure_cluster(
    zk_connect: str,
    log_dir: Path,
    name: str,
    *,
    extra: Sequence[str],
    http: httpx.Client,
    scheme: str = "http",
    size: int = 2,
) -> Iterator[SecureCluster]:
    cluster = SecureCluster(
        zk_connect, log_dir, name, size=size, extra=extra, http=http, scheme=scheme
    )
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()
        http.close()
