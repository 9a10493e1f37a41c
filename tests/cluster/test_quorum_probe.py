"""The proof of a ZooKeeper outage: what members say of themselves, and when it proves that no
quorum serves. Pure logic with a scripted member; then real servers, a standalone one and a
three-member ensemble losing its quorum."""

from __future__ import annotations

import errno
import socket
import ssl
import threading

import pytest

from stratus.zk.ensemble import ZooKeeperEnsemble
from stratus.zk.quorum_probe import (
    Ask,
    MemberState,
    QuorumProbe,
    Refusals,
    ensemble_config,
    member_state,
    membership_mismatch,
    probe_quorum,
    voting_members,
)
from stratus.zk.server import ZooKeeperServer
from tests.harness.zkfixtures import kazoo_client, wait_until

SERVING = "Zookeeper version: 3.9.5\nLatency min/avg/max: 0/0.0/0\nZxid: 0x2\nMode: follower\n"
NOT_SERVING = "This ZooKeeper instance is not currently serving requests\n"
NOT_LISTED = "srvr is not executed because it is not in the whitelist.\n"


def scripted(answer: str | OSError) -> Ask:
    """A ``four_letter_word`` that gives ``answer`` (or raises it)."""

    def ask(host: str, port: int, word: str, timeout: float, tls: ssl.SSLContext | None) -> str:
        assert word == "srvr"
        if isinstance(answer, OSError):
            raise answer
        return answer

    return ask


@pytest.mark.parametrize(
    ("answer", "state"),
    [
        (SERVING, MemberState.SERVING),
        ("Mode: standalone\n", MemberState.SERVING),
        (NOT_SERVING, MemberState.NOT_SERVING),
        (ConnectionRefusedError(errno.ECONNREFUSED, "refused"), MemberState.REFUSED),
        (TimeoutError("timed out"), MemberState.UNKNOWN),
        (OSError(errno.EHOSTUNREACH, "no route to host"), MemberState.UNKNOWN),
        (NOT_LISTED, MemberState.UNKNOWN),
        ("", MemberState.UNKNOWN),  # closed without a word: a partition's proxy, say
    ],
)
def test_a_member_is_outside_a_quorum_only_when_it_says_so_or_nothing_listens(
    answer: str | OSError, state: MemberState
) -> None:
    assert member_state("127.0.0.1", 2181, 1.0, ask=scripted(answer)) is state


REFUSED = ConnectionRefusedError(errno.ECONNREFUSED, "refused")


@pytest.mark.parametrize(
    ("address", "refusals", "state"),
    [
        ("127.0.0.1", Refusals.LOCAL, MemberState.REFUSED),  # this host: no firewall between
        ("192.0.2.1", Refusals.LOCAL, MemberState.REFUSED_UNTRUSTED),  # another host's REJECT?
        ("192.0.2.1", Refusals.TRUST, MemberState.REFUSED),  # the operator says it never is
        ("127.0.0.1", Refusals.NONE, MemberState.REFUSED_UNTRUSTED),
    ],
)
def test_a_refusal_proves_a_member_down_only_where_no_firewall_can_have_answered(
    address: str, refusals: Refusals, state: MemberState
) -> None:
    assert member_state(address, 2181, 1.0, ask=scripted(REFUSED), refusals=refusals) is state


def test_refusals_that_are_not_trusted_prove_nothing() -> None:
    untrusted = MemberState.REFUSED_UNTRUSTED
    assert not probe(untrusted, untrusted, MemberState.NOT_SERVING).proves_no_quorum()
    assert probe(MemberState.REFUSED, untrusted, MemberState.NOT_SERVING).proves_no_quorum()


def probe(*states: MemberState) -> QuorumProbe:
    return QuorumProbe({f"zk{i}:2181": state for i, state in enumerate(states)})


def test_only_a_majority_outside_any_quorum_proves_an_outage() -> None:
    out, unknown, serving = MemberState.NOT_SERVING, MemberState.UNKNOWN, MemberState.SERVING
    assert probe(out, MemberState.REFUSED, unknown).proves_no_quorum()
    assert probe(out).proves_no_quorum()
    assert not probe(out, unknown, unknown).proves_no_quorum()  # the one cut off sees this
    assert not probe(out, out, serving, serving).proves_no_quorum()  # half is no majority
    assert not probe(out, serving, serving).proves_no_quorum()
    assert not probe(out, out, MemberState.REFUSED, serving).proves_no_quorum()  # one serves
    assert not probe().proves_no_quorum()


def test_a_name_whose_addresses_disagree_is_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    addresses = [
        (socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, 2181)) for a in ("10.0.0.1", "10.0.0.2")
    ]
    monkeypatch.setattr(socket, "getaddrinfo", lambda *_args, **_kwargs: addresses)

    def ask(host: str, port: int, word: str, timeout: float, tls: ssl.SSLContext | None) -> str:
        if host == "10.0.0.1":
            raise ConnectionRefusedError(errno.ECONNREFUSED, "refused")
        raise TimeoutError("timed out")  # the address it may serve on, out of reach

    assert member_state("zk.example", 2181, 1.0, ask=ask) is MemberState.UNKNOWN


def test_the_members_are_asked_at_the_same_time() -> None:
    barrier = threading.Barrier(3, timeout=5)

    def ask(host: str, port: int, word: str, timeout: float, tls: ssl.SSLContext | None) -> str:
        barrier.wait()  # only passes when all three asks are under way together
        return NOT_SERVING

    probed = probe_quorum("127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", timeout=1.0, ask=ask)
    assert probed.proves_no_quorum(), probed.summary()


def test_a_standalone_server_serves_until_it_stops_then_refuses(tmp_path) -> None:
    server = ZooKeeperServer(tmp_path / "zk", force_sync=False)
    server.start()
    try:
        running = probe_quorum(server.connect_string + "/stratus", timeout=2.0)
        assert list(running.members.values()) == [MemberState.SERVING]
        assert not running.proves_no_quorum()
    finally:
        server.stop()
    stopped = probe_quorum(server.connect_string, timeout=2.0)
    assert list(stopped.members.values()) == [MemberState.REFUSED]
    assert stopped.proves_no_quorum()
    told_none = probe_quorum(server.connect_string, timeout=2.0, refusals=Refusals.NONE)
    assert not told_none.proves_no_quorum()


def test_an_address_where_nothing_answers_proves_nothing() -> None:
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts, never answers
        port = silent.getsockname()[1]
        assert not probe_quorum(f"127.0.0.1:{port}", timeout=0.5).proves_no_quorum()


@pytest.mark.slow
def test_an_ensemble_proves_its_outage_only_once_its_quorum_is_lost(zk_ensemble) -> None:
    ensemble: ZooKeeperEnsemble = zk_ensemble
    hosts = ensemble.connect_string
    assert not probe_quorum(hosts, timeout=2.0).proves_no_quorum()
    ensemble.servers[0].stop()
    one_down = probe_quorum(hosts, timeout=2.0)
    assert not one_down.proves_no_quorum(), one_down.summary()  # two still form a quorum
    ensemble.servers[1].stop()
    # The last member serves on until it notices that its quorum is gone:
    wait_until(lambda: probe_quorum(hosts, timeout=2.0).proves_no_quorum(), 30, "the outage proven")
    lost = probe_quorum(hosts, timeout=2.0)
    assert lost.proves_no_quorum(), lost.summary()
    assert MemberState.NOT_SERVING in lost.members.values()
    assert list(lost.members.values()).count(MemberState.REFUSED) == 2


CONFIG = (
    b"server.1=10.0.0.1:2888:3888:participant;0.0.0.0:2181\n"
    b"server.2=10.0.0.2:2888:3888\n"
    b"server.3=[fd00::3]:2888:3888:participant\n"
    b"server.4=10.0.0.4:2888:3888:observer\n"
    b"version=100000000"
)


def test_the_voting_members_are_read_from_the_ensembles_config() -> None:
    assert voting_members(CONFIG) == ["10.0.0.1", "10.0.0.2", "fd00::3"]
    assert voting_members(b"") == []


@pytest.mark.parametrize(
    ("hosts", "why"),
    [
        ("10.0.0.1:2181,10.0.0.2:2181,[fd00::3]:2181/stratus", None),
        ("10.0.0.1:2181,10.0.0.2:2181", "2 servers listed for 3 voting members, each once"),
        ("10.0.0.1:2181,10.0.0.1:2182,10.0.0.2:2181", "1 voting members not listed"),
        ("10.0.0.1:2181,10.0.0.2:2181,10.0.0.4:2181", "10.0.0.4 names 0 voting members"),
    ],
)
def test_a_probe_counts_only_if_the_list_names_every_voting_member_once(
    hosts: str, why: str | None
) -> None:
    mismatch = membership_mismatch(hosts, CONFIG)
    assert (mismatch is None) if why is None else (mismatch is not None and why in mismatch)


def test_one_name_for_several_members_is_a_mismatch(monkeypatch: pytest.MonkeyPatch) -> None:
    def resolve(host: str, *_args: object, **_kwargs: object) -> list[tuple[object, ...]]:
        addresses = ["10.0.0.1", "10.0.0.2"] if host == "zk.service" else [host]
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, 0)) for a in addresses]

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    config = b"server.1=10.0.0.1:2888:3888\nserver.2=10.0.0.2:2888:3888\n"
    listed = "zk.service:2181,10.0.0.2:2181"
    assert "zk.service names 2 voting members" in str(membership_mismatch(listed, config))


def test_a_standalone_server_has_no_members_listed_and_one_server_matches() -> None:
    assert membership_mismatch("127.0.0.1:2181", b"") is None
    assert membership_mismatch("127.0.0.1:2181,127.0.0.2:2181", b"") is not None


@pytest.mark.slow
def test_the_config_is_read_outside_a_chroot_and_matches_the_ensembles_list(
    zk_ensemble,
) -> None:
    ensemble: ZooKeeperEnsemble = zk_ensemble
    with kazoo_client(ensemble.connect_string) as admin:
        admin.ensure_path("/some/chroot")
    with kazoo_client(ensemble.connect_string + "/some/chroot") as client:
        config = ensemble_config(client, timeout=5.0)
    assert len(voting_members(config)) == 3
    assert membership_mismatch(ensemble.connect_string + "/some/chroot", config) is None
    first_two = ",".join(ensemble.connect_string.split(",")[:2])
    assert membership_mismatch(first_two, config) is not None
