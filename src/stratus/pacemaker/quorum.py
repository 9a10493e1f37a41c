"""Quorum calls on the pacemakers: how many servers must answer, and what a call got.

The pacemakers do not talk to each other; a writer sends its pulse to each. A write that
counts once a **majority** of the configured servers stored it, and a read answered by a
majority, always share a server: a pulse acknowledged by a majority before a read began is
visible in that read, whatever minority of servers is down or cut off. With fewer than three
servers a majority is every server (1 of 1, 2 of 2): one server down then stops every
quorum write::

    need = majority(3)                      # 2
    ack = await pool.send_pulses_quorum(pulses, deadline_secs=0.4)
    ack.reached                             # stored by at least `need` servers
    read = await pool.get_all_pulses_quorum("/beats", deadline_secs=0.1)
    read.from_majority                      # answered by a majority of the servers
"""

from __future__ import annotations

import math
from dataclasses import dataclass


def majority(servers: int) -> int:
    """The least number of ``servers`` that any two such groups share: more than half."""
    if servers < 1:
        raise ValueError(f"a majority needs at least one server, not {servers}")
    return servers // 2 + 1


def is_majority(answered: int, servers: int) -> bool:
    """Whether ``answered`` of ``servers`` configured is a majority (never of no server)."""
    return servers > 0 and answered >= majority(servers)


def quorum_need(need: int | None, servers: int) -> int:
    """How many of ``servers`` a quorum call waits for: ``need``, or a majority of them when
    None; ValueError for a number no call could reach or that asks for nothing."""
    if need is None:
        return majority(servers)
    if isinstance(need, bool) or not 1 <= need <= servers:
        raise ValueError(
            f"need must be between 1 and the {servers} servers of pacemaker.servers, not {need!r}"
        )
    return need


def check_deadline(deadline_secs: float) -> float:
    """``deadline_secs`` if a quorum call can wait that long: a positive, finite number."""
    number = isinstance(deadline_secs, int | float) and not isinstance(deadline_secs, bool)
    if not (number and math.isfinite(deadline_secs) and deadline_secs > 0):
        raise ValueError(
            f"deadline_secs must be a positive number of seconds, not {deadline_secs!r}"
        )
    return float(deadline_secs)


@dataclass(frozen=True)
class QuorumAck:
    """How a quorum write ended: how many servers acknowledged (stored) it by its deadline, of
    how many configured, and how many it needed. A server that answered later is not counted,
    though its copy may land."""

    acknowledged: int
    servers: int
    need: int

    @property
    def reached(self) -> bool:
        """Whether at least ``need`` servers stored the write."""
        return self.acknowledged >= self.need
