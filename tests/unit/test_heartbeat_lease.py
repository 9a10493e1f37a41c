"""The supervisor's lease alone (``supervisor/heartbeat_lease.py``): gained by a heartbeat
written, lapsed a fence timeout after the start of the last write, and regained only with a
newer read."""

from __future__ import annotations

import pytest

from stratus.supervisor.heartbeat_lease import (
    RIDE_BACK_MARGIN_SECS,
    HeartbeatLease,
    LeaseState,
    ride_back_secs,
)


def test_no_lease_before_the_first_heartbeat_is_written() -> None:
    lease = HeartbeatLease(timeout_secs=6.0)
    assert lease.state is LeaseState.UNLEASED
    assert not lease.may_start(read_started=100.0)
    assert not lease.check(now=1000.0)


def test_a_write_gains_the_lease_and_only_a_newer_read_may_start_workers() -> None:
    lease = HeartbeatLease(timeout_secs=6.0)
    assert lease.renewed(write_started=10.0, now=10.1)
    assert not lease.may_start(read_started=9.0)
    assert lease.may_start(read_started=10.5)


def test_the_lease_lapses_timeout_after_the_start_of_the_last_write() -> None:
    lease = HeartbeatLease(timeout_secs=6.0)
    lease.renewed(write_started=10.0, now=10.5)
    assert not lease.check(now=15.9)
    assert lease.remaining(now=15.0) == pytest.approx(1.0)
    assert lease.check(now=16.0)
    assert lease.state is LeaseState.UNLEASED
    assert not lease.check(now=17.0)  # fenced once
    assert lease.fences == 1


def test_a_write_that_landed_too_late_does_not_regain_the_lease() -> None:
    lease = HeartbeatLease(timeout_secs=6.0)
    lease.renewed(write_started=10.0, now=10.1)
    lease.check(now=16.0)
    assert not lease.renewed(write_started=11.0, now=17.5)
    assert lease.state is LeaseState.UNLEASED


def test_after_a_fence_workers_start_only_on_a_read_newer_than_the_regained_lease() -> None:
    lease = HeartbeatLease(timeout_secs=6.0)
    lease.renewed(write_started=10.0, now=10.1)
    lease.check(now=16.0)
    assert lease.renewed(write_started=30.0, now=30.2)
    assert not lease.may_start(read_started=29.0)  # read while cut off
    assert lease.may_start(read_started=30.3)


# ---------------------------------------------------------------------- the worker spec


def test_a_proven_outage_extends_a_held_lease_from_the_probes_start() -> None:
    lease = HeartbeatLease(timeout_secs=6.0)
    lease.renewed(write_started=100.0, now=100.1)
    assert lease.outage_proven(probe_started=105.0, now=105.5)
    assert not lease.check(now=106.5)  # the write alone would have lapsed at 106
    assert lease.remaining(now=108.0) == pytest.approx(3.0)
    assert lease.check(now=111.0)  # 6 s after the probe began


def test_a_proof_never_gains_a_lease_that_is_not_held() -> None:
    lease = HeartbeatLease(timeout_secs=6.0)
    assert not lease.outage_proven(probe_started=1.0, now=1.1)
    assert lease.state is LeaseState.UNLEASED
    lease.renewed(write_started=10.0, now=10.1)
    assert lease.check(now=16.0)  # fenced
    assert not lease.outage_proven(probe_started=16.5, now=16.6)
    assert lease.state is LeaseState.UNLEASED and not lease.may_start(read_started=17.0)


def test_a_late_or_older_proof_extends_nothing() -> None:
    lease = HeartbeatLease(timeout_secs=6.0)
    lease.renewed(write_started=100.0, now=100.1)
    assert not lease.outage_proven(probe_started=99.0, now=100.2)  # older than the write
    assert not lease.outage_proven(probe_started=101.0, now=107.0)  # answered too late
    assert lease.check(now=106.0)


def test_a_proofs_lease_rides_back_until_the_leader_may_judge_minus_the_stop() -> None:
    """Fence 6, stop 3, supervisor timeout 10: a proof keeps the lease 10 - 3 - margin from
    the probe's start, for the reconnection after ZooKeeper serves again."""
    length = ride_back_secs(6.0, 10.0, 3.0)
    assert length == pytest.approx(7.0 - RIDE_BACK_MARGIN_SECS)
    lease = HeartbeatLease(timeout_secs=6.0, ride_back_secs=length)
    lease.renewed(write_started=100.0, now=100.1)
    assert lease.outage_proven(probe_started=105.0, now=105.5)
    assert not lease.check(now=111.2)  # 6 s after the probe: the fence timeout alone lapses
    assert lease.ends_at() == pytest.approx(105.0 + length)
    assert lease.check(now=105.0 + length)  # never later: every worker stopped in time


def test_the_first_write_after_a_proof_renews_the_lease_as_usual() -> None:
    lease = HeartbeatLease(timeout_secs=6.0, ride_back_secs=6.5)
    lease.renewed(write_started=100.0, now=100.1)
    assert lease.outage_proven(probe_started=105.0, now=105.5)
    assert not lease.renewed(write_started=104.0, now=110.5)  # began before the proof
    assert not lease.renewed(write_started=105.2, now=111.3)  # landed too late: nothing
    assert lease.ends_at() == pytest.approx(111.5)
    assert not lease.renewed(write_started=111.0, now=111.1)  # held: renewed, not regained
    assert lease.ends_at() == pytest.approx(117.0)  # a write's lease again
    assert lease.check(now=118.0)


def test_a_proof_never_rides_back_for_less_than_the_fence_timeout() -> None:
    assert ride_back_secs(6.0, 7.0, 3.0) == 6.0  # 7 - 3 - margin is shorter: no extension
    with pytest.raises(ValueError, match="must not be shorter than the fence timeout"):
        HeartbeatLease(timeout_secs=6.0, ride_back_secs=5.0)


def test_a_proof_that_began_after_the_lease_ran_out_revives_nothing() -> None:
    lease = HeartbeatLease(timeout_secs=6.0)
    lease.renewed(write_started=100.0, now=100.1)
    # The loop stalled past the lease's end, so no check() fenced yet:
    assert not lease.outage_proven(probe_started=106.5, now=107.0)
    assert lease.check(now=107.0)


def test_a_write_begun_after_the_lease_ran_out_renews_nothing_until_the_fence() -> None:
    """A loop (or a machine) stalled past the lease's end, its next write done before the
    next check: the lease lapsed in between, and the workers must stop (a fence), never ride
    on a renewal that came too late to cover the gap."""
    lease = HeartbeatLease(timeout_secs=6.0)
    lease.renewed(write_started=100.0, now=100.1)
    assert not lease.renewed(write_started=106.5, now=106.6)
    assert lease.check(now=106.7)  # the fence
    assert lease.fences == 1
    assert lease.renewed(write_started=106.8, now=106.9)  # regained, by a newer write
    assert not lease.may_start(read_started=106.6)
    assert lease.may_start(read_started=107.0)


def test_a_leaders_revocation_is_regained_only_by_a_write_begun_after_it() -> None:
    lease = HeartbeatLease(timeout_secs=6.0)
    lease.renewed(write_started=10.0, now=10.1)
    assert lease.revoke(now=11.0)
    assert lease.state is LeaseState.UNLEASED and lease.fences == 1
    assert not lease.may_start(read_started=11.5)
    assert not lease.renewed(write_started=10.9, now=11.2)  # begun before the revocation
    assert not lease.check(now=30.0)  # nothing to lapse: no second fence
    assert lease.renewed(write_started=11.1, now=11.2)
    assert not lease.may_start(read_started=11.05)
    assert lease.may_start(read_started=11.3)


def test_a_revocation_of_a_lease_not_held_counts_no_fence() -> None:
    lease = HeartbeatLease(timeout_secs=6.0)
    assert not lease.revoke(now=5.0)  # before the first heartbeat
    lease.renewed(write_started=10.0, now=10.1)
    assert lease.check(now=16.0)  # lapsed: one fence
    assert not lease.revoke(now=17.0)
    assert lease.fences == 1
    assert not lease.renewed(write_started=16.5, now=17.1)  # begun before the revocation
