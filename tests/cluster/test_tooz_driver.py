"""The stratus:// tooz backend on a real ZooKeeper: what it adds to tooz's API.

tooz's own suite (``test_tooz_suite``) proves the API it shares with tooz's other drivers;
these scenarios prove what only this backend gives: the entry point, the epoch of every
term, the fenced write, and the lost-leadership hook.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tooz
import tooz.coordination

from stratus.coordination import Coordinator, Leadership, LeadershipLostError, RevokeReason
from stratus.integrations.tooz import LeadershipLost, StratusDriver, StratusLeaderElected
from stratus.integrations.tooz.errors import ToozNameError, ToozUrlError
from stratus.integrations.tooz.names import node_name, raw_id
from stratus.integrations.tooz.url import zk_settings
from stratus.zk.auth import AuthScheme
from stratus.zk.server import ZooKeeperServer
from tests.cluster.test_election import expire_session
from tests.harness.zkfixtures import kazoo_client, wait_until

GROUP = b"scheduler"


class Recorder(list[Any]):
    """A tooz hook that keeps every event it is given (tooz wants a named callable)."""

    __name__ = "recorder"

    def __call__(self, event: Any) -> None:
        self.append(event)


@pytest.fixture
def url(zk_hosts: str) -> str:
    return f"stratus://{zk_hosts}?timeout=5"


@pytest.fixture
def drivers(url: str) -> Iterator[list[StratusDriver]]:
    started: list[StratusDriver] = []
    yield started
    for driver in started:
        if driver.is_started:
            driver.stop()


def _start(url: str, member: bytes, started: list[StratusDriver]) -> StratusDriver:
    driver = tooz.coordination.get_coordinator(url, member)
    assert isinstance(driver, StratusDriver)
    driver.start()
    started.append(driver)
    return driver


def test_get_coordinator_finds_the_backend_by_its_url_scheme(url: str, zk_hosts: str) -> None:
    driver = tooz.coordination.get_coordinator(url, b"host-a")
    assert isinstance(driver, StratusDriver)
    assert driver.settings.hosts == zk_hosts
    assert driver.settings.session_timeout == 5.0
    assert driver.settings.root == "/tooz"


def test_a_leader_is_told_its_epoch_and_writes_fenced(
    url: str, zk_hosts: str, drivers: list[StratusDriver]
) -> None:
    a = _start(url, b"host-a", drivers)
    events = Recorder()
    a.watch_elected_as_leader(GROUP, events)
    a.run_watchers()
    assert len(events) == 1
    elected = events[0]
    assert isinstance(elected, StratusLeaderElected)
    assert (elected.group_id, elected.member_id, elected.epoch) == (GROUP, b"host-a", 1)
    leadership = a.leadership(GROUP)
    assert leadership is elected.leadership
    with leadership.transaction() as tx:
        tx.create("/tooz/report", b"by host-a")
    with kazoo_client(zk_hosts) as client:
        assert client.get("/tooz/report")[0] == b"by host-a"


def test_the_next_leader_gets_the_next_epoch_and_the_old_one_is_refused(
    url: str, zk_hosts: str, drivers: list[StratusDriver]
) -> None:
    a = _start(url, b"host-a", drivers)
    b = _start(url, b"host-b", drivers)
    seen_a = Recorder()
    seen_b = Recorder()
    a.watch_elected_as_leader(GROUP, seen_a)
    a.watch_elected_lost(GROUP, seen_a)
    b.watch_elected_as_leader(GROUP, seen_b)
    a.run_watchers()
    b.run_watchers()
    old: Leadership = seen_a[0].leadership
    assert seen_b == []

    assert a.stand_down_group_leader(GROUP)
    assert not a.is_leader(GROUP)
    b.run_watchers()
    assert [(e.member_id, e.epoch) for e in seen_b] == [(b"host-b", 2)]
    assert b.get_leader(GROUP).get() == b"host-b"

    a.unwatch_elected_as_leader(GROUP, seen_a)  # watch the loss only: no new run
    a.run_watchers()
    lost = seen_a[-1]
    assert isinstance(lost, LeadershipLost)
    assert (lost.epoch, lost.reason) == (1, RevokeReason.RESIGNED)
    with pytest.raises(LeadershipLostError):
        old.transaction().create("/late", b"stale").commit()
    with kazoo_client(zk_hosts) as client:
        assert client.exists("/late") is None


def test_a_stopped_leaders_successor_is_elected_at_its_next_run_watchers(
    url: str, drivers: list[StratusDriver]
) -> None:
    a = _start(url, b"host-a", drivers)
    b = _start(url, b"host-b", drivers)
    seen = Recorder()
    for driver in (a, b):
        driver.watch_elected_as_leader(GROUP, seen)
        driver.run_watchers()
    a.stop()
    b.run_watchers()  # no watch has to fire first: run_watchers decides the election now
    assert [(e.member_id, e.epoch) for e in seen] == [(b"host-a", 1), (b"host-b", 2)]


def test_a_member_is_back_in_the_queue_after_standing_down(
    url: str, drivers: list[StratusDriver]
) -> None:
    a = _start(url, b"host-a", drivers)
    seen = Recorder()
    a.watch_elected_as_leader(GROUP, seen)
    a.run_watchers()
    a.stand_down_group_leader(GROUP)
    assert not a.stand_down_group_leader(GROUP)  # no longer a candidate
    a.run_watchers()
    assert [e.epoch for e in seen] == [1, 2]


def test_ids_that_are_not_plain_names_are_stored_escaped(
    url: str, zk_hosts: str, drivers: list[StratusDriver]
) -> None:
    a = _start(url, "élu/1", drivers)  # type: ignore[arg-type]  # tooz callers pass str too
    group = b"group with spaces/and slashes"
    a.create_group(group).get()
    a.join_group(group, {"role": "primary"}).get()
    assert group in a.get_groups().get()
    assert a.get_members_with_capabilities(group).get() == {"élu/1".encode(): {"role": "primary"}}
    seen = Recorder()
    a.watch_elected_as_leader(group, seen)
    a.run_watchers()
    assert a.get_leader(group).get() == "élu/1".encode()
    with kazoo_client(zk_hosts) as client:
        assert client.get_children("/tooz/members") == [node_name(group)]
        assert client.exists(f"/tooz/groups/{node_name(group)}/slots/0") is not None


def test_names_map_one_to_one() -> None:
    for raw in (b"plain-1", b"x@41", b"a b", b"\xff\x00", b"_lead", "é".encode(), b"x" * 99):
        assert raw_id(node_name(raw)) == raw
    assert node_name(b"scheduler") == "scheduler"
    assert node_name(b"x@41") != "x@41"
    with pytest.raises(ToozNameError, match="too long"):
        node_name(b"\x00" * 100)


def test_url_options_are_checked() -> None:
    def settings(url: str) -> Any:
        parsed = urllib.parse.urlsplit(url)
        return zk_settings(parsed, urllib.parse.parse_qs(parsed.query))

    got = settings("stratus://u:secret@zk1:2181,zk2:2181/app?timeout=3&root=/mine")
    assert (got.hosts, got.root, got.session_timeout) == ("zk1:2181,zk2:2181/app", "/mine", 3.0)
    assert got.connection_timeout == 3.0
    assert got.auth.scheme is AuthScheme.DIGEST
    with pytest.raises(ToozUrlError, match="unknown option"):
        settings("stratus://zk1:2181?handler=eventlet")
    with pytest.raises(ToozUrlError, match="not a number"):
        settings("stratus://zk1:2181?timeout=soon")
    with pytest.raises(ToozUrlError, match="no ZooKeeper server"):
        settings("stratus:///app")


def test_an_unreachable_zookeeper_fails_start_with_toozs_connection_error() -> None:
    driver = tooz.coordination.get_coordinator(
        "stratus://127.0.0.1:1?timeout=1&connection_timeout=0.5", b"host-a"
    )
    with pytest.raises(tooz.coordination.ToozConnectionError, match=r"127\.0\.0\.1:1"):
        driver.start()
    assert not driver.is_started


def test_the_refresh_of_a_candidacy_decides_it_before_returning(zk_hosts: str) -> None:
    """The election library's ``refresh``, on which ``run_watchers`` relies."""
    elected: list[Leadership] = []
    with Coordinator.standalone(zk_hosts, session_timeout=5) as coord:
        coord.nominate_async("refreshed", "a", elected.append)
        assert coord.refresh("refreshed")
        assert [term.epoch for term in elected] == [1]  # on_elected ran before the return
        assert coord.is_leader("refreshed")


@pytest.mark.slow
def test_a_loss_reaches_the_member_while_zookeeper_cannot_answer(
    zk_restartable: ZooKeeperServer, drivers: list[StratusDriver]
) -> None:
    """With ZooKeeper down, run_watchers cannot list a watched group's members (it raises),
    yet the LeadershipLost hook runs first: the leader hears that it stopped leading."""
    url = f"stratus://{zk_restartable.connect_string}?timeout=2&connection_timeout=1"
    a = _start(url, b"host-a", drivers)
    a.create_group(GROUP).get()
    joins = Recorder()
    seen = Recorder()
    a.watch_join_group(GROUP, joins)
    a.watch_elected_as_leader(GROUP, seen)
    a.watch_elected_lost(GROUP, seen)
    a.run_watchers()
    assert [type(event) for event in seen] == [StratusLeaderElected]

    zk_restartable.stop()

    def heard_the_loss() -> bool:
        with contextlib.suppress(tooz.coordination.OperationTimedOut):
            a.run_watchers()
        return len(seen) > 1

    wait_until(heard_the_loss, 30, "the LeadershipLost hook")
    lost = seen[1]
    assert isinstance(lost, LeadershipLost)
    assert (lost.epoch, lost.reason) == (1, RevokeReason.SUSPENDED)
    assert not a.is_leader(GROUP)
    with pytest.raises(tooz.coordination.OperationTimedOut):
        a.get_members(GROUP).get()


def test_a_member_is_back_in_its_groups_after_its_session_expired(
    url: str, zk_hosts: str, drivers: list[StratusDriver]
) -> None:
    """ZooKeeper drops an expired session's members; tooz's kazoo driver leaves them out."""
    a = _start(url, b"host-a", drivers)
    a.create_group(GROUP).get()
    a.join_group(GROUP, {"role": "primary"}).get()
    a.update_capabilities(GROUP, {"role": "primary", "load": 3}).get()

    expire_session(a.coordinator, zk_hosts)

    def rejoined() -> bool:
        a.run_watchers()
        return b"host-a" in a.get_members(GROUP).get()

    wait_until(rejoined, 30, "host-a back in the group")
    assert a.get_member_capabilities(GROUP, b"host-a").get() == {"role": "primary", "load": 3}
    assert GROUP in a._joined_groups


def test_the_docs_example_runs(zk_hosts: str) -> None:
    """docs/tooz.md's example, as written, against a real ZooKeeper."""
    doc = Path(__file__).resolve().parents[2] / "docs" / "tooz.md"
    [example] = re.findall(r"```python\n(.*?)```", doc.read_text(), flags=re.DOTALL)
    done = subprocess.run(
        [sys.executable, "-c", example],
        env={**os.environ, "ZK": zk_hosts},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "leading b'scheduler' epoch 1",
        "stopped leading b'scheduler' epoch 1 resigned",
    ]
