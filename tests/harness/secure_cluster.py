"""Nimbus processes that answer only to credentials, for the tests of authentication.

A token file with one token of each role, each with its principal (and the nimbuses' own,
``PEER``, and a second submitter's, ``OTHER``), and a cluster of
real ``stratus nimbus`` processes that a test reaches with the client settings it gives
(https when they have TLS settings)::

    auth = ClientAuth(token=ADMIN)
    with secure_cluster(zk, log_dir, "name", extra=[...], auth=auth) as cluster:
        cluster.leader()          # the NimbusProcess every nimbus names
        cluster.http.get(...)     # a client with the token (and TLS) of ``auth``
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx

from stratus.local.processes import NimbusProcess
from stratus.security.client_auth import ClientAuth
from tests.harness.nimbus_cluster import NimbusCluster
from tests.harness.zkfixtures import chroot_for, wait_until

ADMIN = "admin-token-6f1d2c9a8b7e4f30"
SUBMIT = "submit-token-0c4e9b1a2d3f5e67"
READ = "read-token-9a8b7c6d5e4f3a21"
PEER = "peer-token-1b2c3d4e5f6a7b8c"  # the nimbuses' own, to fetch code from each other
SUBMIT_PRINCIPAL = "ci"  # SUBMIT's principal
OTHER = "other-submit-token-4d5e6f7a8b9c"  # a submitter that owns none of ci's pipelines
TOKENS = f"""\
admin  token {ADMIN}  principal=ops
submit token {SUBMIT} principal={SUBMIT_PRINCIPAL}
read   token {READ}   principal=dashboard
read   token {PEER}   principal=nimbuses
submit token {OTHER}  principal=other
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


class SecureCluster(NimbusCluster):
    """Nimbus processes that answer only to credentials; ``http`` is a client with ``auth``.

    Each is awaited with ``NimbusProcess.wait_ready`` and ``auth``: over https when ``auth``
    has TLS settings, with its token (a refusal of them fails at once, saying so).
    """

    def __init__(
        self,
        zk_connect: str,
        log_dir: Path,
        name: str,
        *,
        size: int,
        extra: Sequence[str],
        auth: ClientAuth,
        timeout: float,
    ) -> None:
        options = ["-c", "nimbus.code.sync.freq.secs=1", *extra]
        root = chroot_for(name) + "/stratus"
        super().__init__(zk_connect, root, log_dir, size, options, auth=auth)
        self.http.timeout = httpx.Timeout(timeout)

    def url(self, nimbus: NimbusProcess) -> str:
        return nimbus.url

    def leader(self) -> NimbusProcess:
        """The nimbus every nimbus names as leader, once they agree and its term has begun
        (a leader-only call sent to it is then answered)."""
        leader = self.by_address(self.wait_for_agreed_leader(WAIT_SECS))
        wait_until(lambda: self.leads_a_term(leader), WAIT_SECS, f"{leader.address}'s term")
        return leader

    def standby(self) -> NimbusProcess:
        leader = self.leader()
        return next(n for n in self.nimbuses if n is not leader)


@contextlib.contextmanager
def secure_cluster(
    zk_connect: str,
    log_dir: Path,
    name: str,
    *,
    extra: Sequence[str],
    auth: ClientAuth,
    timeout: float = 10.0,
    size: int = 2,
) -> Iterator[SecureCluster]:
    cluster = SecureCluster(
        zk_connect, log_dir, name, size=size, extra=extra, auth=auth, timeout=timeout
    )
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()
