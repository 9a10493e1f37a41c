"""A quorum of real ZooKeeper servers on this machine's loopback interface.

Every member is an ordinary :class:`~stratus.zk.server.ZooKeeperServer` in
``base_dir/server-<id>``, so a test can stop, kill and restart members one by one to take the
quorum away and give it back::

    with ZooKeeperEnsemble(Path("/tmp/zk3"), size=3) as ensemble:
        ensemble.servers[0].stop()  # the other two still form a quorum

With ``tls`` every member also listens on a secure client port of its own (the first on
``tls.port`` unless 0, the others on free ports; ``secure_connect_string`` names them all),
and with ``tls.quorum`` the members talk to each other over TLS too.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from types import TracebackType
from typing import Self

from stratus.zk.auth import ServerAuth
from stratus.zk.ports import pick_free_port, reserve_port
from stratus.zk.server import (
    SUPERUSER_FILE,
    Quorum,
    QuorumPeer,
    ZooKeeperServer,
    stored_superuser,
)
from stratus.zk.server_checks import check_data_dir
from stratus.zk.tls import ServerTls


class ZooKeeperEnsemble:
    """``size`` ZooKeeper quorum members on loopback, each in ``base_dir/server-<id>``.

    Members are ordinary :class:`ZooKeeperServer` objects: stop, kill and start them one by
    one to take the quorum away and give it back. ``port``, if not 0, is the first member's
    client port; every other port is picked free. ``force_sync``, ``auth`` and ``tls`` are
    every member's (see ``ZooKeeperServer``), but for the secure port: ``tls.port``, if not 0,
    is the first member's, every other one is picked free.
    """

    def __init__(  # noqa: PLR0913 keyword-only options
        self,
        base_dir: Path,
        size: int = 3,
        *,
        tick_time_ms: int = 200,
        java: str | None = None,
        port: int = 0,
        max_session_timeout_ms: int | None = None,
        force_sync: bool = True,
        auth: ServerAuth | None = None,
        tls: ServerTls | None = None,
    ) -> None:
        if size < 1:
            raise ValueError(f"an ensemble needs at least one server, not {size}")
        if port:
            reserve_port(port)
        peers = tuple(
            QuorumPeer(
                server_id=server_id,
                client_port=port if (server_id == 1 and port) else pick_free_port(),
                peer_port=pick_free_port(),
                election_port=pick_free_port(),
            )
            for server_id in range(1, size + 1)
        )
        self.base_dir = Path(base_dir).absolute()
        self.servers = [
            ZooKeeperServer(
                self.base_dir / f"server-{peer.server_id}",
                tick_time_ms=tick_time_ms,
                java=java,
                quorum=Quorum(my_id=peer.server_id, peers=peers),
                max_session_timeout_ms=max_session_timeout_ms,
                force_sync=force_sync,
                auth=auth,
                tls=_member_tls(tls, peer.server_id),
            )
            for peer in peers
        ]

    def __repr__(self) -> str:
        return f"ZooKeeperEnsemble({self.connect_string}, base_dir={self.base_dir})"

    @property
    def connect_string(self) -> str:
        """The kazoo ``hosts`` string naming every member."""
        return ",".join(server.connect_string for server in self.servers)

    @property
    def secure_connect_string(self) -> str | None:
        """The kazoo ``hosts`` string naming every member's secure port, if they have one."""
        secure = [server.secure_connect_string for server in self.servers]
        return ",".join(filter(None, secure)) if all(secure) else None

    def start(self, timeout: float = 60.0) -> None:
        """Launch every member that is not running and wait until every member serves.

        Every member serving implies a quorum serves. On failure all members are stopped.
        """
        deadline = time.monotonic() + timeout
        check_data_dir(self.base_dir, ("server-", SUPERUSER_FILE))  # never among another's files
        try:
            self._share_superuser()
            for server in self.servers:
                server.launch()
            for server in self.servers:
                server.wait_serving(max(0.0, deadline - time.monotonic()))
            self.servers[0].lock_down()
        except BaseException:
            self.stop()
            raise

    def _share_superuser(self) -> None:
        """Every member knows the same superuser: the ensemble's (made if need be)."""
        first = self.servers[0]
        if first.auth.users and first.auth.superuser is None:
            superuser = stored_superuser(self.base_dir)
            for server in self.servers:
                server.auth = dataclasses.replace(server.auth, superuser=superuser)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every member (all signalled at once, then each awaited); idempotent."""
        for server in self.servers:
            server.signal_stop()
        for server in self.servers:
            server.stop(timeout)

    def leader(self) -> ZooKeeperServer | None:
        """The member that currently leads, if any."""
        return next((server for server in self.servers if server.mode() == "leader"), None)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _member_tls(tls: ServerTls | None, server_id: int) -> ServerTls | None:
    """Member ``server_id``'s TLS: ``tls`` as given for the first, a free port for the rest."""
    if tls is None or server_id == 1:
        return tls
    return dataclasses.replace(tls, port=0)  # ZooKeeperServer picks a free one
