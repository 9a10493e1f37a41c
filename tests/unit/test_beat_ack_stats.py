"""The beat agent's acknowledgement tally (``beat_ack_stats``): what it counts, the file it
writes at most once a second, and what the supervisor's metrics make of it."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from stratus.supervisor.beat_ack_stats import ACK_STATS_FILE, BeatAckTally, read_tally
from stratus.supervisor.metrics import SupervisorMetrics
from stratus.worker.lease_file import BEAT_LEASE_FILE, write_lease
from tests.harness.supervisor_fakes import FakeClock
from tests.unit.test_beat_lease import Board, Clock, agent_of
from tests.unit.test_standby_metrics import samples


def test_the_tally_counts_each_beat_in_its_bucket_and_the_beats_that_did_not_count() -> None:
    tally = BeatAckTally()
    for secs in (0.003, 0.004, 0.03, 0.5):
        tally.counted(secs)
    tally.not_counted()
    assert tally.count == 4
    assert tally.missed == 1
    assert tally.sum_secs == pytest.approx(0.537)
    assert tally.cumulative() == [
        ("0.005", 2),
        ("0.01", 2),
        ("0.025", 2),
        ("0.05", 3),
        ("0.1", 3),
        ("0.2", 3),
        ("0.4", 3),
        ("+Inf", 4),
    ]


def test_the_tally_is_written_privately_at_most_once_a_second_and_read_back(
    tmp_path: Path,
) -> None:
    path = tmp_path / ACK_STATS_FILE
    tally = BeatAckTally()
    tally.counted(0.002)
    assert tally.write_if_due(path, 10.0)
    tally.counted(0.002)
    assert not tally.write_if_due(path, 10.5)
    first = read_tally(path)
    assert first is not None and first.count == 1
    assert tally.write_if_due(path, 11.0)
    again = read_tally(path)
    assert again is not None and again.count == 2
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"not json",
        b"[]",
        json.dumps({"buckets": [1, 2], "sum_secs": 0.1, "missed": 0}).encode(),
        json.dumps({"buckets": [-1] * 8, "sum_secs": 0.1, "missed": 0}).encode(),
        json.dumps({"buckets": [0] * 8, "sum_secs": "x", "missed": 0}).encode(),
        json.dumps({"buckets": [0] * 8, "sum_secs": 0.1, "missed": True}).encode(),
        b" " * 5000,
    ],
    ids=["empty", "not_json", "a_list", "short", "negative", "sum_text", "missed_bool", "large"],
)
def test_a_file_that_is_not_a_tally_reads_as_none(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / ACK_STATS_FILE
    path.write_bytes(content)
    assert read_tally(path) is None


def test_the_agent_times_each_beat_to_its_majority_and_counts_the_missed(tmp_path: Path) -> None:
    clock = Clock()
    board = Board(clock, takes=0.02)
    agent = agent_of(tmp_path, clock, board)
    agent.beat_once()
    board.acknowledged = 1  # a minority: the beat does not count
    agent.beat_once()
    assert agent.acks.count == 1
    assert agent.acks.sum_secs == pytest.approx(0.02)
    assert agent.acks.missed == 1


def test_the_supervisor_shows_the_agents_tally_as_a_histogram_and_a_counter(
    tmp_path: Path,
) -> None:
    lease = tmp_path / BEAT_LEASE_FILE
    write_lease(lease, 100.5)
    metrics = SupervisorMetrics(
        "s2",
        workers=list,
        fences=lambda: 0,
        lease_held=lambda: True,
        machine=lambda: None,
        beat_lease=lease,
        clock=FakeClock(100.0),
    )
    on_s2 = (("supervisor", "s2"),)
    assert ("stratus_supervisor_beat_ack_seconds_count", on_s2) not in samples(metrics.registry)

    tally = BeatAckTally()
    tally.counted(0.004)
    tally.counted(0.3)
    tally.not_counted()
    tally.write_if_due(tmp_path / ACK_STATS_FILE, 0.0)
    seen = samples(metrics.registry)
    assert seen[("stratus_supervisor_beat_ack_seconds_count", on_s2)] == 2
    assert seen[("stratus_supervisor_beat_ack_seconds_sum", on_s2)] == pytest.approx(0.304)
    assert seen[("stratus_supervisor_beat_ack_seconds_bucket", (("le", "0.005"), *on_s2))] == 1
    assert seen[("stratus_supervisor_beats_not_counted_total", on_s2)] == 1
