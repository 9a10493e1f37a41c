"""A tooz leader frozen past its session (SIGSTOP, then SIGCONT): stratus:// against zookeeper://.

The same scenario with real processes against both backends. Leader ``a`` is frozen until
ZooKeeper has expired its session and ``b`` has been elected, then woken. Against stratus,
``a`` is told ``LeadershipLost`` through its hook, no longer leads, and the write it makes
with its old epoch is refused (nothing is written). Against tooz's kazoo driver, ``a``,
back on a new session, still believes it leads beside ``b``, hears nothing, and its write
lands: the difference is asserted, not claimed.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from stratus.zk.server import ZooKeeperServer
from tests.harness.contender import Contender
from tests.harness.zkfixtures import kazoo_client, wait_until

SESSION = 2  # seconds: the session timeout both backends ask for
CONTENDER = Path(__file__).parents[1] / "harness" / "tooz_contender.py"
GROUP = "frozen"


def spawn(url: str, member: str) -> Contender:
    """A tooz member process (``tests/harness/tooz_contender.py``), once it runs for leadership."""
    process = subprocess.Popen(
        [sys.executable, str(CONTENDER), url, GROUP, member],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        bufsize=1,
    )
    contender = Contender(member, process)
    threading.Thread(target=contender._read, daemon=True).start()
    contender.expect("queued", timeout=60)
    return contender


@pytest.fixture
def members() -> Iterator[list[Contender]]:
    spawned: list[Contender] = []
    yield spawned
    for member in spawned:
        member.stop()


def status(member: Contender) -> dict[str, str]:
    member.send("status")
    line = member.expect("status ", timeout=10)
    return dict(field.split("=") for field in line.split()[1:])


def freeze_until_replaced(a: Contender, b: Contender) -> None:
    """SIGSTOP ``a`` until ``b`` is elected (so ZooKeeper expired ``a``'s session), SIGCONT."""
    a.signal(signal.SIGSTOP)
    try:
        b.expect("elected", timeout=SESSION * 15)
    finally:
        a.signal(signal.SIGCONT)


@pytest.mark.slow
def test_a_frozen_stratus_leader_is_told_it_lost_and_its_stale_write_is_refused(
    zk_hosts: str, members: list[Contender]
) -> None:
    url = f"stratus://{zk_hosts}?timeout={SESSION}"
    a = spawn(url, "a")
    members.append(a)
    assert a.expect("elected", timeout=30) == "elected 1"
    a.send("write /tooz/by-a-leading")
    assert a.expect("write-", timeout=10) == "write-ok /tooz/by-a-leading"
    b = spawn(url, "b")
    members.append(b)

    freeze_until_replaced(a, b)
    assert b.seen[-1] == "elected 2"

    lost = a.expect("lost ", timeout=SESSION * 15)
    assert lost in ("lost suspended 1", "lost session_lost 1")
    assert status(a)["leading"] == "0"
    a.send("write /tooz/by-a-stale")
    assert a.expect("write-", timeout=10) == "write-refused LeadershipLostError"
    with kazoo_client(zk_hosts) as observer:
        assert observer.exists("/tooz/by-a-leading") is not None
        assert observer.exists("/tooz/by-a-stale") is None
    assert status(b)["leading"] == "1"


@pytest.mark.slow
def test_a_frozen_kazoo_driver_leader_still_believes_it_leads(
    zk_server: ZooKeeperServer, members: list[Contender]
) -> None:
    namespace = f"tooz-frozen-{uuid.uuid4().hex[:8]}"  # the kazoo driver ignores a chroot
    url = f"zookeeper://{zk_server.connect_string}?timeout={SESSION}&namespace={namespace}"
    a = spawn(url, "a")
    members.append(a)
    assert a.expect("elected", timeout=30) == "elected -"  # no epoch to tell
    frozen_session = status(a)["session"]
    b = spawn(url, "b")
    members.append(b)

    freeze_until_replaced(a, b)

    last: list[dict[str, str]] = []

    def back_on_a_new_session() -> bool:
        last[:] = [status(a)]
        return last[0]["connected"] == "1" and last[0]["session"] != frozen_session

    # its old session is gone for ZooKeeper (b was elected) and now for a itself too
    wait_until(back_on_a_new_session, SESSION * 15, "a back on a new session")
    assert last[0]["leading"] == "1", "the kazoo driver's leader noticed it lost leadership"
    assert status(b)["leading"] == "1"  # two members each believe they lead
    assert not [line for line in a.seen if line.startswith("lost")]
    a.send(f"write /{namespace}/by-a-stale")
    assert a.expect("write-", timeout=10) == f"write-ok /{namespace}/by-a-stale"
    with kazoo_client(zk_server.connect_string) as observer:
        assert observer.exists(f"/{namespace}/by-a-stale") is not None
