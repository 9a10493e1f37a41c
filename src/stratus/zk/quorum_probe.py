"""Whether a ZooKeeper ensemble provably has no quorum: the proof of an outage.

A process that cannot reach ZooKeeper cannot tell an outage of ZooKeeper from its own
partition. It can ask the members themselves: a member outside a quorum answers ``srvr``
with "not currently serving requests", and a member whose address refuses the connection
has no process serving on it. When a majority of the ensemble answers so, no quorum served
through the whole probe (majorities intersect: a quorum serving throughout would have had a
member answer "serving"). Any quorum serving later formed after the probe began, so every
client of it lost its connection after that moment::

    probe = probe_quorum("zk1:2181,zk2:2181,zk3:2181/stratus", timeout=1.0)
    if probe.proves_no_quorum():
        ...  # nothing that needs ZooKeeper can have been done since the probe began

The host list must name every voting member: a majority of a partial list proves nothing.
A member that times out, or answers anything else (the word not whitelisted), is unknown,
never "not serving": an unsure probe proves nothing.
"""

from __future__ import annotations

import errno
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from kazoo.hosts import collect_hosts

from stratus.zk.fourletter import four_letter_word

NOT_SERVING = "not currently serving requests"
SERVING_MARK = "\nMode: "


class MemberState(StrEnum):
    SERVING = "serving"  # answered srvr with its mode: part of a quorum
    NOT_SERVING = "not_serving"  # answered that it serves no requests
    REFUSED = "refused"  # nothing listens on its address
    UNKNOWN = "unknown"  # no answer in time, or an answer that says neither


@dataclass(frozen=True)
class QuorumProbe:
    """What each member of the ensemble said, asked once each."""

    members: Mapping[str, MemberState]

    def proves_no_quorum(self) -> bool:
        """True when a majority of the members is surely outside any quorum."""
        down = sum(
            s in (MemberState.NOT_SERVING, MemberState.REFUSED) for s in self.members.values()
        )
        return bool(self.members) and 2 * down > len(self.members)

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
) -> MemberState:
    """What the member at ``host:port`` says of itself (asked over ``tls`` if given)."""
    try:
        answer = ask(host, port, "srvr", timeout, tls)
    except ConnectionRefusedError:
        return MemberState.REFUSED
    except OSError as exc:
        return MemberState.REFUSED if exc.errno == errno.ECONNREFUSED else MemberState.UNKNOWN
    if NOT_SERVING in answer:
        return MemberState.NOT_SERVING
    return MemberState.SERVING if SERVING_MARK in f"\n{answer}" else MemberState.UNKNOWN


def probe_quorum(
    hosts: str,
    timeout: float,
    tls: ssl.SSLContext | None = None,
    ask: Ask = four_letter_word,
) -> QuorumProbe:
    """Ask every member of the connect string ``hosts`` (a chroot is ignored) once."""
    servers, _chroot = collect_hosts(hosts)
    members = {
        f"{host}:{port}": member_state(host, port, timeout, tls, ask) for host, port in set(servers)
    }
    return QuorumProbe(members)
