"""The supervisor's lease: never two copies of one pipeline, even across a partition.

Guarantees: the lease is held only while some heartbeat write that *started* less than
``supervisor.fence.timeout.secs`` ago has succeeded; once it lapses, the supervisor stops
all its workers itself (``event=fenced``) and starts none until a write succeeds again and a
read of the assignments that started after that write says which are still its own. The
leader moves a supervisor's pipelines only after ``nimbus.supervisor.timeout.secs`` without
a heartbeat change, and the configuration checks that fence + stop time is shorter, so the
old worker is dead before a new one can start elsewhere (docs/supervisor.md has the
timeline). Pure: times come from the caller's monotonic clock::

    lease = HeartbeatLease(timeout_secs=6.0)
    lease.renewed(write_started=t, now=t + 0.01)   # True: held (again) from t
    lease.may_start(read_started=t + 0.5)          # True: a read newer than the lease
    lease.check(now=t + 6.0)                        # True: lapsed just now, fence

With ``supervisor.zookeeper.outage: ride``, a proof that no ZooKeeper quorum serves extends a
held lease as a write would (``outage_proven``): through an outage of ZooKeeper nobody can
move a pipeline, so the workers keep running; a supervisor cut off alone cannot prove it and
fences on time. A proof's lease lasts ``ride_back_secs`` from the probe's start (at least the
fence timeout): after an outage the session reconnects some moments after ZooKeeper serves
again, and the leader, whose own connection came back after the proof began, judges no
silence before a whole ``nimbus.supervisor.timeout.secs`` after that (``ride_back_secs``).
The first write after the proof renews the lease as usual, which may end it sooner.

A leader may also take the lease away (``revoke``, the graceful fence of its endpoint): the
supervisor stops every worker as at a lapse, and only a write that *starts* after the
revocation gains it again, so a read of the assignments newer than that write decides what
runs here.
"""

from __future__ import annotations

from enum import StrEnum


class LeaseState(StrEnum):
    UNLEASED = "unleased"  # no heartbeat written yet, or lapsed (fenced): start nothing
    HELD = "held"  # a recent heartbeat write succeeded


RIDE_BACK_MARGIN_SECS = 0.5  # the loop's tick, the workers' look at the lease file, and more


def ride_back_secs(fence_secs: float, supervisor_timeout_secs: float, stop_secs: float) -> float:
    """How long a proof of an outage keeps the lease from the probe's start: every worker
    stopped (``stop_secs``) with ``RIDE_BACK_MARGIN_SECS`` to spare before the leader may
    move a pipeline, ``supervisor_timeout_secs`` after its own reconnection, which follows
    the proof; never less than ``fence_secs``."""
    return max(fence_secs, supervisor_timeout_secs - stop_secs - RIDE_BACK_MARGIN_SECS)


class HeartbeatLease:
    """One supervisor's lease, owned by its control loop (not thread-safe)."""

    def __init__(self, timeout_secs: float, *, ride_back_secs: float | None = None) -> None:
        if ride_back_secs is not None and ride_back_secs < timeout_secs:
            raise ValueError(
                f"a proof's lease ({ride_back_secs:g} s) must not be shorter than the fence "
                f"timeout ({timeout_secs:g} s)"
            )
        self.timeout_secs = timeout_secs
        self.ride_back_secs = timeout_secs if ride_back_secs is None else ride_back_secs
        self.state = LeaseState.UNLEASED
        self.fences = 0  # times the lease lapsed
        self._renewed_to: float | None = None  # start of the newest write or proof
        self._length = timeout_secs  # how long the newest renewal lasts: a write's, a proof's
        self._held_since: float | None = None  # start of the write that (re)gained it

    def renewed(self, *, write_started: float, now: float) -> bool:
        """A heartbeat write that started at ``write_started`` succeeded; True if that
        (re)gains the lease.

        A write that completes later than the timeout after its start renews nothing: the
        leader may have judged this supervisor dead meanwhile. Nor does a write that started
        after the held lease had run out (a loop or a whole machine stalled past its end, no
        ``check`` in between): the lease lapsed before it began, so ``check`` fences first,
        and a write that starts after that gains it again.
        """
        if self._renewed_to is not None and write_started <= self._renewed_to:
            return False
        ends = self.ends_at()
        if ends is not None and write_started >= ends:
            return False  # lapsed before this write began: check() says so, then fences
        late = now - write_started >= self.timeout_secs
        if late and self.state is LeaseState.HELD:
            return False  # renews nothing: the lease's own end stands (a proof's, say)
        self._renewed_to = write_started
        self._length = self.timeout_secs
        if self.state is LeaseState.HELD or late:
            return False
        self.state = LeaseState.HELD
        self._held_since = write_started
        return True

    def outage_proven(self, *, probe_started: float, now: float) -> bool:
        """A probe that started at ``probe_started`` proved that no ZooKeeper quorum served
        (``stratus.zk.quorum_probe``): the held lease lasts ``ride_back_secs`` from then,
        or until a write that starts later renews it; True if that extended it.

        No leader can have acted since the probe began without losing its connection after
        that moment and then waiting a whole supervisor timeout, so the lease may run from
        it, and for as long as every worker is stopped before that timeout ends. A proof
        never gains a lease that is not held: starting workers takes a write.
        """
        ends = self.ends_at()
        if ends is None or self._renewed_to is None:
            return False
        if probe_started <= self._renewed_to or now - probe_started >= self.ride_back_secs:
            return False
        if probe_started >= ends:
            return False  # the lease had run out before the probe began (a stalled loop)
        self._renewed_to = probe_started
        self._length = self.ride_back_secs
        return True

    def check(self, now: float) -> bool:
        """True if the lease lapsed just now: the caller fences (stops every worker)."""
        if self.state is not LeaseState.HELD or self.remaining(now) > 0:
            return False
        self.state = LeaseState.UNLEASED
        self.fences += 1
        return True

    def ends_at(self) -> float | None:
        """When the held lease lapses unless renewed (the clock's time), or None if not held."""
        if self.state is not LeaseState.HELD or self._renewed_to is None:
            return None
        return self._renewed_to + self._length

    @property
    def held_since(self) -> float | None:
        """The start of the write that gained the lease held now (None if not held): the
        same through every renewal, a later one after each lapse."""
        return self._held_since if self.state is LeaseState.HELD else None

    def revoke(self, now: float) -> bool:
        """A leader fenced this supervisor at ``now``: the lease is not held, and only a
        write that starts later gains it again; True if it was held until now (the caller
        stops every worker either way)."""
        held = self.state is LeaseState.HELD
        self.state = LeaseState.UNLEASED
        if held:  # a lease not held was counted when it lapsed, or was never held
            self.fences += 1
        self._renewed_to = now if self._renewed_to is None else max(self._renewed_to, now)
        return held

    def remaining(self, now: float) -> float:
        """Seconds left before the lease lapses (0 when not held)."""
        if self.state is not LeaseState.HELD or self._renewed_to is None:
            return 0.0
        return max(0.0, self._renewed_to + self._length - now)

    def may_start(self, read_started: float | None) -> bool:
        """Whether workers may start on a read of the assignments that started then."""
        return (
            self.state is LeaseState.HELD
            and read_started is not None
            and self._held_since is not None
            and read_started >= self._held_since
        )
