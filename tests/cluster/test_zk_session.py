"""``ZkSession``: its states, its listeners and its lease, on real ZooKeeper servers; the lease's
rules on a fake clock."""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest
from kazoo.client import KazooClient, KazooState

from stratus.zk.errors import ZooKeeperUnavailableError
from stratus.zk.lease import SessionLease
from stratus.zk.session import SessionChange, SessionState, ZkSession, ZkSettings, next_state
from tests.harness.zkfixtures import wait_until

SESSION = 2.0
S = SessionState


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_every_kazoo_state_maps_to_one_session_state_and_closed_is_final() -> None:
    assert next_state(S.NEW, KazooState.CONNECTED) is S.CONNECTED
    assert next_state(S.CONNECTED, KazooState.SUSPENDED) is S.SUSPENDED
    assert next_state(S.SUSPENDED, KazooState.LOST) is S.EXPIRED
    assert next_state(S.EXPIRED, KazooState.CONNECTED) is S.CONNECTED
    assert next_state(S.CONNECTED, None) is S.CLOSED
    assert next_state(S.CLOSED, KazooState.CONNECTED) is S.CLOSED
    assert SessionChange(S.SUSPENDED, S.CONNECTED).resumed
    assert SessionChange(S.EXPIRED, S.CONNECTED).renewed
    assert not SessionChange(S.NEW, S.CONNECTED).resumed


def test_the_lease_ends_at_once_when_the_connection_is_suspended() -> None:
    clock = FakeClock()
    lease = SessionLease(clock)
    lease.connection_changed(connected=True)
    lease.confirm(lease.probe(), session_id=7, length=4.0)
    assert lease.end(7) == 104.0
    lease.connection_changed(connected=False)
    assert lease.end(7) == 0.0


def test_the_lease_vouches_only_for_the_session_that_renewed_it() -> None:
    clock = FakeClock()
    lease = SessionLease(clock)
    lease.connection_changed(connected=True)
    lease.confirm(lease.probe(), session_id=7, length=4.0)
    lease.connection_changed(connected=False)
    lease.connection_changed(connected=True)
    clock.now = 101.0
    lease.confirm(lease.probe(), session_id=8, length=4.0)
    assert (lease.end(7), lease.end(8)) == (0.0, 105.0)


def test_a_reply_to_a_request_sent_before_a_connection_change_renews_nothing() -> None:
    clock = FakeClock()
    lease = SessionLease(clock)
    lease.connection_changed(connected=True)
    probe = lease.probe()
    lease.connection_changed(connected=False)
    lease.connection_changed(connected=True)
    lease.confirm(probe, session_id=7, length=4.0)
    assert lease.end(7) == 0.0


def test_the_lease_runs_from_when_the_request_was_sent_and_never_shrinks() -> None:
    clock = FakeClock()
    lease = SessionLease(clock)
    lease.connection_changed(connected=True)
    early = lease.probe()
    clock.now = 102.0
    late = lease.probe()
    clock.now = 103.0  # the replies arrive now, in the opposite order
    lease.confirm(late, session_id=7, length=4.0)
    lease.confirm(early, session_id=7, length=4.0)
    assert lease.end(7) == 106.0


@pytest.mark.solo
def test_a_restarted_server_suspends_the_session_and_it_resumes(zk_restartable) -> None:
    changes: list[SessionChange] = []
    settings = ZkSettings(zk_restartable.connect_string, session_timeout=15.0)
    with ZkSession(settings) as session:
        session.add_listener(changes.append)
        session_id = session.session_id
        assert session.lease_end(session_id) > time.monotonic()
        assert session.connections == 1

        zk_restartable.stop()
        wait_until(lambda: session.state is S.SUSPENDED, 15, "the session suspended")
        assert session.lease_end(session_id) == 0.0, "the lease outlived the connection"
        zk_restartable.start()

        wait_until(lambda: session.lease_end(session_id) > time.monotonic(), 15, "lease renewed")
        assert session.session_id == session_id
        assert changes == [
            SessionChange(S.CONNECTED, S.SUSPENDED),
            SessionChange(S.SUSPENDED, S.CONNECTED),
        ]
        assert changes[-1].resumed
        assert session.connections == 2  # down in between: its users' watch was interrupted


def test_an_expired_session_is_replaced_and_its_lease_never_comes_back(zk_hosts: str) -> None:
    changes: list[SessionChange] = []
    with ZkSession(ZkSettings(zk_hosts, session_timeout=SESSION)) as session:
        session.add_listener(changes.append)
        old = session.session_id
        expire(session.client, zk_hosts)

        wait_until(lambda: any(c.renewed for c in changes), 15, "a new session")
        assert S.EXPIRED in [c.state for c in changes]
        wait_until(lambda: session.lease_end(session.session_id) > 0, 10, "the new lease")
        assert session.session_id != old
        assert session.lease_end(old) == 0.0


def test_a_renewer_that_keeps_failing_reports_a_suspension_and_resumes_once_it_renews(
    zk_hosts: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    changes: list[SessionChange] = []
    with ZkSession(ZkSettings(zk_hosts, session_timeout=SESSION)) as session:
        session.add_listener(changes.append)
        session_id = session.session_id
        renewer = session._renewer
        assert renewer is not None

        def broken(*_args: Any, **_kwargs: Any) -> None:
            raise RuntimeError("injected renewal failure")

        monkeypatch.setattr(session.client, "exists", broken)
        wait_until(lambda: session.state is S.SUSPENDED, 15, "the stall reported")
        assert changes == [SessionChange(S.CONNECTED, S.SUSPENDED)]
        assert session.lease_end(session_id) == 0.0, "the lease outlived the stall"
        assert renewer.is_alive(), "the renewer died of a failure"

        monkeypatch.undo()
        wait_until(lambda: session.lease_end(session_id) > time.monotonic(), 15, "lease renewed")
        assert changes == [
            SessionChange(S.CONNECTED, S.SUSPENDED),
            SessionChange(S.SUSPENDED, S.CONNECTED),
        ]
        assert session.session_id == session_id


def test_close_is_heard_by_listeners_and_is_final(zk_hosts: str) -> None:
    changes: list[SessionChange] = []
    session = ZkSession(ZkSettings(zk_hosts, session_timeout=SESSION)).start()
    session.add_listener(changes.append)
    session.close()
    assert changes == [SessionChange(S.CONNECTED, S.CLOSED)]
    assert session.state is S.CLOSED


def test_no_server_means_unavailable_within_the_connection_timeout() -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    settings = ZkSettings(f"127.0.0.1:{port}", connection_timeout=0.5)
    with pytest.raises(ZooKeeperUnavailableError, match=r"within 0\.5s"):
        ZkSession(settings).start()


def test_settings_normalise_the_root_and_refuse_bad_timeouts() -> None:
    assert ZkSettings("h:2181", root="apps/stratus/").root == "/apps/stratus"
    with pytest.raises(ValueError, match="positive"):
        ZkSettings("h:2181", session_timeout=0)


def expire(client: Any, hosts: str) -> None:
    """Expire a session the way ZooKeeper's own tests do: a second client takes it over."""
    session_id, password = client.client_id
    intruder = KazooClient(hosts=hosts, client_id=(session_id, password), timeout=SESSION)
    intruder.start(timeout=10)
    intruder.stop()
    intruder.close()
