"""The lease a supervisor hands its workers (``stratus.worker.lease_file``): written, read
back, watched; a missing or unreadable file is a lapsed lease."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from stratus.worker.lease_file import LeaseWatch, read_lease, write_lease
from tests.harness.supervisor_fakes import FakeClock
from tests.harness.zkfixtures import wait_until


def test_a_lease_reads_back_as_written(tmp_path: Path) -> None:
    path = tmp_path / "lease"
    write_lease(path, 1234.5)
    assert read_lease(path) == 1234.5
    # every worker reads it, whichever user it runs as: it holds a time, nothing secret
    assert path.stat().st_mode & 0o777 == 0o644
    write_lease(path, 0.0)
    assert read_lease(path) == 0.0


@pytest.mark.parametrize("content", [None, b"", b"soon\n", b"inf\n", b"nan\n", b"1" * 100])
def test_a_missing_or_unreadable_lease_is_none(tmp_path: Path, content: bytes | None) -> None:
    path = tmp_path / "lease"
    if content is not None:
        path.write_bytes(content)
    assert read_lease(path) is None


def test_the_watch_says_the_lease_lapsed_once_its_end_has_passed(tmp_path: Path) -> None:
    path, clock = tmp_path / "lease", FakeClock(100.0)
    watch = LeaseWatch(path, on_lapsed=lambda reason: None, clock=clock)
    assert "missing or unreadable" in str(watch.lapsed())
    write_lease(path, 102.0)
    assert watch.lapsed() is None
    clock.advance(1.9)
    assert watch.lapsed() is None
    clock.advance(1.6)
    assert watch.lapsed() == "the supervisor's lease ended 1.5 s ago and was not renewed"


def test_the_watch_calls_back_once_when_the_lease_is_not_renewed(tmp_path: Path) -> None:
    path, clock = tmp_path / "lease", FakeClock(100.0)
    write_lease(path, 101.0)
    reasons: list[str] = []
    lapsed = threading.Event()

    def on_lapsed(reason: str) -> None:
        reasons.append(reason)
        lapsed.set()

    watch = LeaseWatch(path, on_lapsed, clock=clock, poll_secs=0.01)
    watch.start()
    write_lease(path, 105.0)  # renewed: the clock passes the first end, not the second
    clock.advance(2.0)
    assert not lapsed.wait(0.2)
    clock.advance(4.0)
    wait_until(lapsed.is_set, 5, "the watch to see the lapse")
    clock.advance(10.0)
    watch.stop()
    assert reasons == ["the supervisor's lease ended 1.0 s ago and was not renewed"]


def test_a_lease_gained_again_after_the_end_the_watch_last_saw_is_a_lapse(
    tmp_path: Path,
) -> None:
    """The watch did not look across the lapse (the machine stalled): the lease holds when it
    looks again, but it was gained after the end seen last, so the worker stops all the
    same; a lease renewed without a break, however late the look, holds."""
    path, clock = tmp_path / "lease", FakeClock(100.0)
    write_lease(path, 101.0, since=99.5)
    watch = LeaseWatch(path, on_lapsed=lambda reason: None, clock=clock)
    assert watch.lapsed() is None  # sees 101.0
    clock.advance(2.0)  # not looking past 101.0; renewed meanwhile, no break
    write_lease(path, 103.0)
    assert watch.lapsed() is None
    clock.advance(2.0)  # not looking past 103.0; lapsed, then gained again at 103.5
    write_lease(path, 105.0, since=103.5)
    assert watch.lapsed() == (
        "the supervisor's lease ended 1.0 s ago, while this worker was not looking, "
        "and was gained again 0.5 s after its end"
    )


def test_without_a_record_of_the_gain_the_watch_judges_by_the_end_alone(tmp_path: Path) -> None:
    """A supervisor of an earlier release writes no ``.since``: its workers run as before."""
    path, clock = tmp_path / "lease", FakeClock(100.0)
    write_lease(path, 101.0)
    watch = LeaseWatch(path, on_lapsed=lambda reason: None, clock=clock)
    assert watch.lapsed() is None
    clock.advance(2.0)
    write_lease(path, 103.0)
    assert watch.lapsed() is None


def test_a_watch_with_a_grace_outlasts_a_gap(tmp_path: Path) -> None:
    """A standby worker's watch ends it only as an orphan: a gap shorter than its grace is
    none."""
    path, clock = tmp_path / "lease", FakeClock(100.0)
    write_lease(path, 101.0, since=99.0)
    watch = LeaseWatch(path, on_lapsed=lambda reason: None, clock=clock, grace_secs=5.0)
    assert watch.lapsed() is None
    clock.advance(2.0)
    write_lease(path, 103.0, since=101.5)
    assert watch.lapsed() is None
