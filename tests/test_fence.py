"""The supervisor's lease alone (``supervisor/fence.py``): gained by a heartbeat written,
lapsed a fence timeout after the start of the last write, and regained only with a newer read."""

from __future__ import annotations

import pytest

from stratus.supervisor.fence import Lease, LeaseState


def test_no_lease_before_the_first_heartbeat_is_written() -> None:
    lease = Lease(timeout_secs=6.0)
    assert lease.state is LeaseState.UNLEASED
    assert not lease.may_start(read_started=100.0)
    assert not lease.check(now=1000.0)


def test_a_write_gains_the_lease_and_only_a_newer_read_may_start_workers() -> None:
    lease = Lease(timeout_secs=6.0)
    assert lease.renewed(write_started=10.0, now=10.1)
    assert not lease.may_start(read_started=9.0)
    assert lease.may_start(read_started=10.5)


def test_the_lease_lapses_timeout_after_the_start_of_the_last_write() -> None:
    lease = Lease(timeout_secs=6.0)
    lease.renewed(write_started=10.0, now=10.5)
    assert not lease.check(now=15.9)
    assert lease.remaining(now=15.0) == pytest.approx(1.0)
    assert lease.check(now=16.0)
    assert lease.state is LeaseState.UNLEASED
    assert not lease.check(now=17.0)  # fenced once
    assert lease.fences == 1


def test_a_write_that_landed_too_late_does_not_regain_the_lease() -> None:
    lease = Lease(timeout_secs=6.0)
    lease.renewed(write_started=10.0, now=10.1)
    lease.check(now=16.0)
    assert not lease.renewed(write_started=11.0, now=17.5)
    assert lease.state is LeaseState.UNLEASED


def test_after_a_fence_workers_start_only_on_a_read_newer_than_the_regained_lease() -> None:
    lease = Lease(timeout_secs=6.0)
    lease.renewed(write_started=10.0, now=10.1)
    lease.check(now=16.0)
    assert lease.renewed(write_started=30.0, now=30.2)
    assert not lease.may_start(read_started=29.0)  # read while cut off
    assert lease.may_start(read_started=30.3)


# ---------------------------------------------------------------------- the worker spec


def test_a_proven_outage_extends_a_held_lease_from_the_probes_start() -> None:
    lease = Lease(timeout_secs=6.0)
    lease.renewed(write_started=100.0, now=100.1)
    assert lease.outage_proven(probe_started=105.0, now=105.5)
    assert not lease.check(now=106.5)  # the write alone would have lapsed at 106
    assert lease.remaining(now=108.0) == pytest.approx(3.0)
    assert lease.check(now=111.0)  # 6 s after the probe began


def test_a_proof_never_gains_a_lease_that_is_not_held() -> None:
    lease = Lease(timeout_secs=6.0)
    assert not lease.outage_proven(probe_started=1.0, now=1.1)
    assert lease.state is LeaseState.UNLEASED
    lease.renewed(write_started=10.0, now=10.1)
    assert lease.check(now=16.0)  # fenced
    assert not lease.outage_proven(probe_started=16.5, now=16.6)
    assert lease.state is LeaseState.UNLEASED and not lease.may_start(read_started=17.0)


def test_a_late_or_older_proof_extends_nothing() -> None:
    lease = Lease(timeout_secs=6.0)
    lease.renewed(write_started=100.0, now=100.1)
    assert not lease.outage_proven(probe_started=99.0, now=100.2)  # older than the write
    assert not lease.outage_proven(probe_started=101.0, now=107.0)  # answered too late
    assert lease.check(now=106.0)


def test_a_proof_that_began_after_the_lease_ran_out_revives_nothing() -> None:
    lease = Lease(timeout_secs=6.0)
    lease.renewed(write_started=100.0, now=100.1)
    # The loop stalled past the lease's end, so no check() fenced yet:
    assert not lease.outage_proven(probe_started=106.5, now=107.0)
    assert lease.check(now=107.0)


def test_a_leaders_revocation_is_regained_only_by_a_write_begun_after_it() -> None:
    lease = Lease(timeout_secs=6.0)
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
    lease = Lease(timeout_secs=6.0)
    assert not lease.revoke(now=5.0)  # before the first heartbeat
    lease.renewed(write_started=10.0, now=10.1)
    assert lease.check(now=16.0)  # lapsed: one fence
    assert not lease.revoke(now=17.0)
    assert lease.fences == 1
    assert not lease.renewed(write_started=16.5, now=17.1)  # begun before the revocation
