"""Whether a ZooKeeper ensemble provably has no quorum: the proof of an outage.

A process that cannot reach ZooKeeper cannot tell an outage of ZooKeeper from its own
partition. It can ask the members themselves, all at once: a member outside a quorum answers
``srvr`` with "not currently serving requests", and a member every address of which refuses
the connection has no process serving on it, where no firewall can answer for it
(``Refusals``: by default only a member on this host counts so; a firewall's ``REJECT``
looks like a refusal). When a majority of the ensemble answers so, and no member answers
that it serves, no quorum served at the moment of the asks (a quorum and the majority that
answered would share a member). Any quorum serving later formed after the probe began, so
every client of it lost its connection after that moment::

    probe = probe_quorum("zk1:2181,zk2:2181,zk3:2181/stratus", timeout=1.0)
    if probe.proves_no_quorum():
        ...  # nothing that needs ZooKeeper can have been done since the probe began

The host list must name every voting member, once: a majority of a partial list (or of a
list naming one member twice, or a name that stands for several members) proves nothing.
A member that times out, or answers anything else (the word not whitelisted), is unknown,
never "not serving": an unsure probe proves nothing.
"""

from __future__ import annotations

import errno
import socket
import ssl
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from enum import StrEnum

from kazoo.client import KazooClient
from kazoo.hosts import collect_hosts
from kazoo.protocol.serialization import GetData

from stratus.security.loopback import is_local_address
from stratus.zk.fourletter import four_letter_word

NOT_SERVING = "not currently serving requests"
SERVING_MARK = "\nMode: "
ENSEMBLE_CONFIG = "/zookeeper/config"  # the voting members, readable by anyone


class MemberState(StrEnum):
    SERVING = "serving"  # answered srvr with its mode: part of a quorum
    NOT_SERVING = "not_serving"  # answered that it serves no requests
    REFUSED = "refused"  # nothing listens on its address
    # refused where a firewall may have answered for it (see Refusals): proves nothing
    REFUSED_UNTRUSTED = "refused_untrusted"
    UNKNOWN = "unknown"  # no answer in time, or an answer that says neither


class Refusals(StrEnum):
    """Which refused connections mean that nothing listens (``zookeeper.outage.refusals``).

    A firewall that answers a partition with a rejection (iptables' ``REJECT``: an ICMP
    "port unreachable" that Linux reports as a refused connection, or a TCP reset) cannot
    be told from a stopped server.
    """

    LOCAL = "local"  # only a member on this host: no firewall stands between
    TRUST = "trust"  # every member: the operator says the network never rejects
    NONE = "none"  # none: only "not currently serving" answers prove anything

    def counts(self, address: str) -> bool:
        """Whether a refusal at ``address`` means that nothing listens there."""
        if self is Refusals.LOCAL:
            return is_local_address(address)
        return self is Refusals.TRUST


@dataclass(frozen=True)
class QuorumProbe:
    """What each member of the ensemble said, asked once each."""

    members: Mapping[str, MemberState]

    def proves_no_quorum(self) -> bool:
        """True when a majority of the members is surely outside any quorum and none said
        it serves (a refusal counts only as ``probe_quorum`` was told to trust it)."""
        states = list(self.members.values())
        if MemberState.SERVING in states:
            return False
        down = sum(state in (MemberState.NOT_SERVING, MemberState.REFUSED) for state in states)
        return bool(states) and 2 * down > len(states)

    def summary(self) -> str:
        """``host:port=state`` for each member, for a log line."""
        return ",".join(f"{member}={state.value}" for member, state in sorted(self.members.items()))


Ask = Callable[[str, int, str, float, "ssl.SSLContext | None"], str]


def member_state(
    host: str,
    port: int,
    timeout: float,
    tls: ssl.SSLContext | None = None,
    ask: Ask = four_letter_word,
    *,
    refusals: Refusals = Refusals.LOCAL,
) -> MemberState:
    """What the member at ``host:port`` says of itself (asked over ``tls`` if given), at every
    address its name has: refused only when every address refuses, each where ``refusals``
    trusts a refusal."""
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return MemberState.UNKNOWN
    addresses = sorted({str(info[4][0]) for info in found})
    states = {
        _address_state(address, port, timeout, tls, ask, refusals=refusals) for address in addresses
    }
    if len(states) == 1:
        return states.pop()
    return MemberState.SERVING if MemberState.SERVING in states else MemberState.UNKNOWN


def _address_state(
    address: str,
    port: int,
    timeout: float,
    tls: ssl.SSLContext | None,
    ask: Ask,
    *,
    refusals: Refusals,
) -> MemberState:
    try:
        answer = ask(address, port, "srvr", timeout, tls)
    except OSError as exc:
        refused = isinstance(exc, ConnectionRefusedError) or exc.errno == errno.ECONNREFUSED
        if not refused:
            return MemberState.UNKNOWN
        return MemberState.REFUSED if refusals.counts(address) else MemberState.REFUSED_UNTRUSTED
    if NOT_SERVING in answer:
        return MemberState.NOT_SERVING
    return MemberState.SERVING if SERVING_MARK in f"\n{answer}" else MemberState.UNKNOWN


def probe_quorum(
    hosts: str,
    timeout: float,
    tls: ssl.SSLContext | None = None,
    ask: Ask = four_letter_word,
    *,
    refusals: Refusals = Refusals.LOCAL,
) -> QuorumProbe:
    """Ask every member of the connect string ``hosts`` (a chroot is ignored) once, all at
    the same time; a refused connection counts as nothing listening where ``refusals``
    says so."""
    servers, _chroot = collect_hosts(hosts)
    members = sorted(set(servers))

    def state(member: tuple[str, int]) -> MemberState:
        return member_state(member[0], member[1], timeout, tls, ask, refusals=refusals)

    with ThreadPoolExecutor(max_workers=max(1, len(members))) as pool:
        states = list(pool.map(state, members))
    answers = zip(members, states, strict=True)
    return QuorumProbe({f"{host}:{port}": state for (host, port), state in answers})


def voting_members(config: bytes) -> list[str]:
    """The hosts of the voting members in ZooKeeper's ``/zookeeper/config`` (its
    ``server.N=host:quorum:election[:role][;client]`` lines; observers left out)."""
    hosts = []
    for line in config.decode("utf-8", errors="replace").splitlines():
        key, _, value = line.partition("=")
        if not key.startswith("server.") or not value:
            continue
        fields = value.partition(";")[0].split(":")  # host:quorum:election[:role]
        role = fields.pop() if fields[-1].isalpha() else "participant"
        if role == "participant":
            hosts.append(":".join(fields[:-2]).strip("[]"))
    return hosts


def membership_mismatch(hosts: str, config: bytes) -> str | None:
    """Why the connect string ``hosts`` does not name every voting member of ``config``
    (``/zookeeper/config``) once, so that a probe of it proves nothing; None when it does.

    Members are told apart by address: a listed name that stands for several members'
    addresses (one name for the ensemble) is refused. Members sharing one address (an
    ensemble on one host) can be checked by their count only. A standalone server has an
    empty config: the string must then name one server.
    """
    servers = collect_hosts(hosts)[0]
    listed = {(frozenset(_addresses(host)), port): host for host, port in servers}
    members = [_addresses(host) for host in voting_members(config)]
    if not members:
        return None if len(listed) == 1 else f"{len(listed)} servers listed, 1 serves"
    if len(listed) != len(members):
        return f"{len(listed)} servers listed for {len(members)} voting members, each once"
    covered: set[int] = set()
    for (addresses, _port), host in listed.items():
        hits = [i for i, member in enumerate(members) if member & addresses]
        if not hits or len({frozenset(members[i]) for i in hits}) > 1:
            return f"{host} names {len(hits)} voting members"
        covered.update(hits)
    if len(covered) != len(members):
        return f"{len(members) - len(covered)} voting members not listed"
    return None


def _addresses(host: str) -> set[str]:
    try:
        return {str(info[4][0]) for info in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)}
    except OSError:
        return {host}


def ensemble_config(client: KazooClient, timeout: float) -> bytes:
    """``/zookeeper/config`` read outside the client's chroot, where ZooKeeper keeps it (kazoo
    prefixes every path with the chroot, so the request is sent as kazoo's own calls are)."""
    result = client.handler.async_result()
    client._call(GetData(ENSEMBLE_CONFIG, None), result)
    data, _stat = result.get(timeout=timeout)
    return bytes(data or b"")
