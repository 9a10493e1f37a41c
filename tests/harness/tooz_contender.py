"""A tooz member in a process of its own, for the frozen-leader tests, and how to spawn it.

As a script (``python tests/harness/tooz_contender.py URL GROUP MEMBER``) it starts a tooz
coordinator on ``URL`` (``stratus://`` or tooz's ``zookeeper://``), runs for leadership of ``GROUP``
and calls ``run_watchers`` in a loop, as a tooz service does. It reports on stdout, one line per
event: ``queued``, ``elected <epoch>`` (``-`` where the driver has none), ``lost <reason>
<epoch>`` (stratus only: tooz has no such event), ``status leading=<0|1> connected=<0|1>
session=<hex>``, ``write-ok <path>``, ``write-refused <ErrorClass>``. It reads commands on
stdin: ``status``, ``write <path>`` (stratus: a fenced create with the epoch of the term it
was last told of; the kazoo driver has no fencing, so a plain create), ``quit``.

``leading`` is what the member believes: stratus's ``is_leader``; for tooz's kazoo driver,
the only belief it keeps, whether its leader lock says it is acquired (``run_watchers`` never
runs for election again while it does). ``tests/cluster/test_tooz_frozen_leader.py`` spawns it.
"""

from __future__ import annotations

import select
import sys
from typing import Any

import tooz
import tooz.coordination

from stratus.coordination import CoordinationError, Leadership
from stratus.integrations.tooz import LeadershipLost, StratusDriver

RUN_WATCHERS_EVERY_SECS = 0.05


class _Member:
    def __init__(self, url: str, group: bytes, member: bytes) -> None:
        self.group = group
        self.coord = tooz.coordination.get_coordinator(url, member)
        self.terms: list[Leadership] = []

    def say(self, line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    def elected(self, event: Any) -> None:
        leadership = getattr(event, "leadership", None)
        if leadership is not None:
            self.terms[:] = [leadership]
        self.say(f"elected {getattr(event, 'epoch', '-')}")

    def lost(self, event: LeadershipLost) -> None:
        self.say(f"lost {event.reason.value} {event.epoch}")

    def status(self) -> str:
        coord = self.coord
        if isinstance(coord, StratusDriver):
            session = coord.coordinator.session
            leading = coord.is_leader(self.group)
            connected, session_id = session.connected, session.session_id or 0
        else:  # tooz's kazoo driver: its leader lock is all it knows
            locks = coord._leader_locks  # type: ignore[attr-defined]
            leading = self.group in locks and locks[self.group].is_acquired
            client = coord._coord  # type: ignore[attr-defined]
            connected, session_id = client.connected, (client.client_id or (0,))[0]
        return f"status leading={int(leading)} connected={int(connected)} session={session_id:x}"

    def write(self, path: str) -> str:
        coord = self.coord
        if not isinstance(coord, StratusDriver):
            coord._coord.create(path, b"x")  # type: ignore[attr-defined]
            return f"write-ok {path}"
        try:
            if not self.terms:
                raise CoordinationError("never elected")
            self.terms[0].transaction().create(path, b"x").commit()
        except CoordinationError as exc:
            return f"write-refused {type(exc).__name__}"
        return f"write-ok {path}"

    def serve(self) -> None:
        coord = self.coord
        coord.start()
        coord.watch_elected_as_leader(self.group, self.elected)
        if isinstance(coord, StratusDriver):
            coord.watch_elected_lost(self.group, self.lost)
        self.say("queued")
        while True:
            try:
                coord.run_watchers()
            except tooz.ToozError as exc:  # ZooKeeper unreachable for now: keep going
                self.say(f"watchers-error {type(exc).__name__}")
            ready, _, _ = select.select([sys.stdin], [], [], RUN_WATCHERS_EVERY_SECS)
            if not ready:
                continue
            verb, *args = sys.stdin.readline().split() or ["quit"]
            if verb == "status":
                self.say(self.status())
            elif verb == "write":
                self.say(self.write(args[0]))
            elif verb == "quit":
                break
        coord.stop()


if __name__ == "__main__":
    _Member(sys.argv[1], sys.argv[2].encode(), sys.argv[3].encode()).serve()
