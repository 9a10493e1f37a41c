"""The oracle (``stratus.chaos.oracle``) on synthetic histories: each check finds the
violation a broken run leaves, with the lines that prove it, and passes a clean run."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from stratus.chaos.oracle import (
    check_exactly_once,
    check_leader_writes,
    check_single_run,
    check_single_worker,
    check_submissions,
    streaming_counted,
    streaming_expected,
)
from stratus.chaos.promotions import check_promotions_explained
from stratus.chaos.trail_events import Clocks, Event, events_of, load_events
from stratus.chaos.unavailability import leader_unavailability, pipeline_unavailability

EXACT = Clocks()


def line(event: str, t: float, *, host: str = "h1", pid: int = 1, **fields: Any) -> dict[str, Any]:
    """A history line at time ``t`` of both clocks of ``host`` (a host's clocks agree here;
    a test shifts another host's wall clock with ``wall``)."""
    wall = fields.pop("wall", t)
    return {"wall": wall, "mono": t, "host": host, "pid": pid, "event": event, **fields}


def worker(pid: int, pipeline: str = "p", host: str = "h1"):
    def at(event: str, t: float, **fields: Any) -> dict[str, Any]:
        return line(event, t, host=host, pid=pid, kind="worker", pipeline=pipeline, **fields)

    return at


def leader(pid: int, host: str = "h1"):
    def at(event: str, t: float, epoch: int, **fields: Any) -> dict[str, Any]:
        return line(
            event, t, host=host, pid=pid, kind="nimbus", group="nimbus", epoch=epoch, **fields
        )

    return at


# ---------------------------------------------------------------------- (a)


def moved_pipeline(second_starts: float, first_stops: float) -> list[Event]:
    w1, w2 = worker(1), worker(2)
    return events_of(
        [
            w1("worker_started", 0.0),
            w1("batch_committed", 1.0, batch_id=0),
            w1("batch_committed", 2.0, batch_id=1),
            w2("worker_started", second_starts),
            w1("batch_committed", 3.0, batch_id=2),
            w1("worker_stopped", first_stops),
            w2("batch_committed", 4.0, batch_id=3),
            w2("batch_committed", 5.0, batch_id=4),
        ]
    )


def test_a_pipeline_moved_after_its_old_worker_stopped_passes() -> None:
    assert check_single_worker(moved_pipeline(second_starts=3.6, first_stops=3.5), EXACT) == []


def test_two_workers_committing_batches_at_once_are_found_with_their_lines() -> None:
    [violation] = check_single_worker(moved_pipeline(second_starts=2.5, first_stops=4.5), EXACT)
    assert violation.check == "single_worker"
    proof = [(e.process[1], e.name, e.get("batch_id")) for e in violation.lines]
    assert proof == [
        (1, "worker_started", None),
        (1, "batch_committed", 2),  # while worker 2 ran
        (1, "worker_stopped", None),
        (2, "worker_started", None),
        (2, "batch_committed", 3),  # while worker 1 ran
        (2, "batch_committed", 4),
    ]


def test_a_killed_workers_run_ends_at_its_last_line() -> None:
    w1, w2 = worker(1), worker(2)
    history = [
        w1("worker_started", 0.0),
        w1("batch_committed", 1.0, batch_id=0),  # then SIGKILL: no worker_stopped
        w2("worker_started", 2.0),
        w2("batch_committed", 3.0, batch_id=1),
    ]
    assert check_single_worker(events_of(history), EXACT) == []


def test_overlap_within_the_hosts_clock_skew_is_not_flagged_beyond_it_is() -> None:
    w1, w2 = worker(1, host="a"), worker(2, host="b")
    history = [
        w1("worker_started", 0.0),
        w1("batch_committed", 1.0),
        w2("worker_started", 1.2),
        w1("batch_committed", 1.4),
        w1("worker_stopped", 1.5),
        w2("batch_committed", 1.45),
        w2("batch_committed", 2.0),
    ]
    assert check_single_worker(events_of(history), Clocks(skew_secs=0.5)) == []
    assert len(check_single_worker(events_of(history), Clocks(skew_secs=0.01))) == 1


def test_workers_of_different_pipelines_may_run_at_once() -> None:
    a, b = worker(1, "a"), worker(2, "b")
    history = [a("worker_started", 0), b("worker_started", 0.5)]
    history += [a("batch_committed", 1), b("batch_committed", 1.5), a("batch_committed", 2)]
    assert check_single_worker(events_of(history), EXACT) == []


# ---------------------------------------------------------------------- (b)


def failover(old_write_at: float, **old_write: Any) -> list[Event]:
    n1, n2 = leader(1), leader(2)
    return events_of(
        [
            n1("leader_won", 0.0, 1),
            n1("leader_write", 1.0, 1, began_wall=0.9, began_mono=0.9),
            n2("leader_won", 5.0, 2),
            n2("leader_write", 6.0, 2, began_wall=5.9, began_mono=5.9),
            n1("leader_write", old_write_at, 1, **old_write),
        ]
    )


def test_writes_of_each_term_in_its_own_time_pass() -> None:
    history = failover(4.8, began_wall=4.5, began_mono=4.5)
    assert check_leader_writes(history, EXACT) == []


def test_a_deposed_leaders_write_applied_after_the_next_win_is_found() -> None:
    history = failover(7.0, began_wall=6.5, began_mono=6.5)
    violations = check_leader_writes(history, EXACT)
    messages = [v.message for v in violations]
    assert any("deposed leader's write was accepted" in m for m in messages)
    assert any("went back from 2 to 1" in m for m in messages)
    deposed = next(v for v in violations if "deposed" in v.message)
    assert [(e.name, e.get("epoch")) for e in deposed.lines] == [
        ("leader_won", 2),
        ("leader_write", 1),
    ]


def test_a_write_sent_before_the_next_win_and_answered_after_it_is_not_proof() -> None:
    history = failover(5.5, began_wall=4.9, began_mono=4.9)  # applied before 5.0, maybe
    assert check_leader_writes(history, EXACT) == []


def test_a_write_without_its_term_won_is_found() -> None:
    n1 = leader(1)
    history = events_of([n1("leader_write", 1.0, 3, began_wall=0.9, began_mono=0.9)])
    [violation] = check_leader_writes(history, EXACT)
    assert "without having won" in violation.message


def test_writes_across_hosts_are_judged_by_wall_clocks_within_the_skew() -> None:
    n1, n2 = leader(1, host="a"), leader(2, host="b")
    history = events_of(
        [
            n1("leader_won", 0.0, 1),
            n2("leader_won", 105.0, 2, wall=5.0),  # host b's monotonic clock is its own
            n1("leader_write", 5.6, 1, began_wall=5.4, began_mono=5.4),
        ]
    )
    assert check_leader_writes(history, Clocks(skew_secs=1.0)) == []
    assert len(check_leader_writes(history, Clocks(skew_secs=0.1))) == 1


# ---------------------------------------------------------------------- (c)


def test_an_acknowledged_submission_missing_at_the_end_is_found() -> None:
    client = [
        line("submit_acknowledged", 1.0, pid=9, kind="client", pipeline=name, request_id=n)
        for n, name in enumerate(["a", "b", "c"])
    ]
    [violation] = check_submissions(events_of(client), final_pipelines={"a"}, killed={"c"})
    assert "'b'" in violation.message and violation.lines[0].get("request_id") == 1
    assert check_submissions(events_of(client), final_pipelines={"a", "b", "c"}) == []


# ---------------------------------------------------------------------- (d)


def rows_for(ids: range) -> list[dict[str, Any]]:
    """The streaming example's output rows for events ``ids``, as ``read_rows`` gives them."""
    rows = []
    for (start, key), count in sorted(streaming_expected(ids).items(), key=repr):
        window = {"start": datetime.fromtimestamp(float(start), UTC), "end": None}
        rows.append({"window": window, "key": key, "count": count})
    return rows


def test_every_input_counted_once_passes() -> None:
    fed = range(100)
    rows = [
        *rows_for(fed),
        {"window": {"start": datetime(2030, 1, 1)}, "key": "__flush__", "count": 1},
    ]
    assert check_exactly_once(streaming_expected(fed), streaming_counted(rows)) == []
    naive = [
        {**row, "window": {"start": row["window"]["start"].replace(tzinfo=None)}} for row in rows
    ]
    assert check_exactly_once(streaming_expected(fed), streaming_counted(naive)) == []


def test_a_window_written_twice_or_short_is_found() -> None:
    fed = range(100)
    rows = rows_for(fed)
    doubled = [*rows, rows[0]]
    messages = [
        v.message for v in check_exactly_once(streaming_expected(fed), streaming_counted(doubled))
    ]
    assert any("written 2 times" in m for m in messages)
    assert any("counted twice" in m for m in messages)
    lost = check_exactly_once(streaming_expected(fed), streaming_counted(rows[1:]))
    assert len(lost) == 1 and "lost" in lost[0].message


# ---------------------------------------------------------------------- (e)


def test_the_leaders_gaps_run_from_a_loss_or_a_death_to_the_next_win() -> None:
    n1, n2, n3 = leader(1), leader(2), leader(3)
    history = events_of(
        [
            n1("leader_won", 0.0, 1),
            n1("leader_lost", 10.0, 1, reason="resigned"),
            n2("leader_won", 11.0, 2),
            n2("leader_write", 12.0, 2),  # then SIGKILL
            line("process_killed", 12.5, pid=9, kind="client", of_host="h1", of_pid=2),
            n3("leader_won", 16.5, 3),
            n3("leader_write", 17.0, 3),
        ]
    )
    report = leader_unavailability(history, bound_secs=3.0)
    assert [round(gap.secs, 3) for gap in report.gaps] == [1.0, 4.0]
    assert report.percentile(50) == 1.0 and report.percentile(100) == 4.0
    [over] = report.violations
    assert [e.name for e in over.lines] == ["process_killed", "leader_won"]
    assert "2 gaps" in report.summary() and "1 over" in report.summary()
    assert leader_unavailability(history, bound_secs=5.0).violations == []


def test_a_kill_recorded_once_its_daemon_runs_again_ends_the_term_at_its_signal() -> None:
    """The injector writes a kill's line once the daemon is started again (``began_*``: the
    signal); the leader it killed stopped leading then, not at the line."""
    n1, n2 = leader(1), leader(2)
    history = events_of(
        [
            n1("leader_won", 0.0, 1),
            fault("process_killed", 9.0, began=5.0, of_host="h1", of_pid=1, target="nimbus"),
            n2("leader_won", 7.0, 2),
        ]
    )
    [gap] = leader_unavailability(history, bound_secs=3.0).gaps
    assert round(gap.secs, 3) == 2.0


def test_a_pipelines_gaps_between_batches_count_its_moves() -> None:
    w1, w2 = worker(1), worker(2)
    history = events_of(
        [w1("batch_committed", t) for t in (1.0, 2.0, 3.0)]
        + [w2("batch_committed", t) for t in (9.0, 10.0)]
    )
    [report] = pipeline_unavailability(history, bound_secs=5.0)
    assert [(gap.secs, gap.moved) for gap in report.gaps] == [
        (1.0, False),
        (1.0, False),
        (6.0, True),
        (1.0, False),
    ]
    assert len(report.violations) == 1 and report.percentile(90) == 6.0


def test_lines_are_read_from_several_files_and_a_torn_line_is_skipped(tmp_path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text(json.dumps(line("leader_won", 0.0, epoch=1, group="nimbus")) + '\n{"torn')
    b.write_text(json.dumps(line("leader_write", 1.0, pid=2, epoch=1, group="nimbus")) + "\n")
    events = load_events([a, b])
    assert [(e.name, e.source) for e in events] == [
        ("leader_won", f"{a}:1"),
        ("leader_write", f"{b}:1"),
    ]


def test_a_worker_that_runs_on_after_the_next_started_is_found_without_batches() -> None:
    w1, w2 = worker(1), worker(2)
    history = [
        w1("worker_started", 0.0),
        w1("batch_committed", 1.0, batch_id=0),
        w2("worker_started", 2.0),  # its first batch failed: the checkpoint saw the other
        w1("batch_committed", 3.0, batch_id=1),  # the old one ran past the new one's start
    ]
    assert check_single_worker(events_of(history), EXACT) == []  # never both committing
    [violation] = check_single_run(events_of(history), EXACT)
    assert violation.check == "single_run"
    assert "ran on two workers at once: pid 2" in violation.message
    assert [(e.process[1], e.name) for e in violation.lines] == [
        (1, "worker_started"),
        (2, "worker_started"),
        (1, "batch_committed"),
    ]


def test_a_worker_stopped_before_the_next_started_runs_once() -> None:
    for stops, found in ((1.9, 0), (2.1, 1)):
        w1, w2 = worker(1), worker(2)
        history = [
            w1("worker_started", 0.0),
            w1("worker_stopped", stops),
            w2("worker_started", 2.0),
        ]
        assert len(check_single_run(events_of(history), EXACT)) == found
        assert len(check_single_run(events_of(history), Clocks(skew_secs=0.5))) == found


# ---------------------------------------------------------------------- (f)


def fault(event: str, ends: float, began: float, supervisor: str = "s1", **fields: Any):
    """A fault injector's line: the fault of ``supervisor`` (or its host) from ``began`` to
    ``ends``, when it was undone and recorded."""
    return line(
        event,
        ends,
        pid=9,
        kind="client",
        supervisor=supervisor,
        began_wall=began,
        began_mono=began,
        secs=ends - began,
        **fields,
    )


def promotion(t: float, *, silent: float, how: str = "floor", **fields: Any) -> dict[str, Any]:
    """The leader's promotion of pipeline p's standby worker off s1 onto s2 at ``t``, after
    ``silent`` seconds without a beat of s1, against the default floor."""
    return line(
        "worker_promoted",
        t,
        pid=5,
        kind="nimbus",
        pipeline="p",
        from_supervisor="s1",
        to_supervisor="s2",
        how=how,
        silent_secs=silent,
        floor_secs=1.02,
        **fields,
    )


def test_a_promotion_after_its_supervisors_host_was_killed_or_cut_is_explained() -> None:
    host_killed = [
        line("process_killed", 10.0, pid=9, of_pid=41, target="nimbus", supervisor="s1"),
        line("process_killed", 10.0, pid=9, of_pid=42, target="supervisor", supervisor="s1"),
        promotion(11.2, silent=1.25),  # its last beat was heard just before the kill
    ]
    assert check_promotions_explained(events_of(host_killed), EXACT) == []
    cut = [promotion(11.5, silent=1.3, how="fenced"), fault("host_cut", 14.0, began=10.0)]
    assert check_promotions_explained(events_of(cut), EXACT) == []


def test_a_supervisor_killed_and_down_past_its_lease_explains_a_later_silence() -> None:
    """Its beat agent beats on until the killed supervisor's own lease ends, then stops: the
    silence begins seconds after the signal, while the supervisor is down (the kill's line,
    written once it runs again, spans it); a kill long over by the silence explains nothing."""
    silent_later = promotion(13.0, silent=1.3)  # silent since 11.7, 1.7 s after the signal

    def killed(restarted: float) -> list[Event]:
        kill = fault("process_killed", restarted, began=10.0, of_pid=42, target="supervisor")
        return events_of([kill, silent_later])

    assert check_promotions_explained(killed(restarted=14.5), EXACT) == []
    assert len(check_promotions_explained(killed(restarted=10.5), EXACT)) == 1


def test_a_promotion_without_a_failure_is_found_with_its_pipeline_and_time() -> None:
    history = [
        fault("host_stressed", 8.0, began=4.0, burners=2, cpu="python"),  # load is no failure
        promotion(7.0, silent=1.1, wall=1_800_000_000.0),
    ]
    [violation] = check_promotions_explained(events_of(history), EXACT)
    assert violation.check == "promotions_explained"
    assert (
        "pipeline 'p' was promoted from supervisor 's1' to 's2' at 2027-01-15T08:00:00.000+00:00"
        in violation.message
    )
    assert "floor of 1.02 s: an unexplained promotion" in violation.message
    assert [e.name for e in violation.lines] == ["worker_promoted", "host_stressed"]


def test_a_promotion_after_a_pause_shorter_than_its_floor_is_found() -> None:
    def paused(until: float) -> list[Event]:
        history = [
            fault("process_paused", until, began=10.0, of_pid=42, target="supervisor"),
            promotion(11.3, silent=1.1),  # silent since 10.2, during the pause
        ]
        return events_of(history)

    [violation] = check_promotions_explained(paused(until=10.6), EXACT)
    assert [(e.name, round(e.get("secs"), 3)) for e in violation.lines[1:]] == [
        ("process_paused", 0.6)
    ]
    assert check_promotions_explained(paused(until=11.1), EXACT) == []  # 1.1 s: past the floor


def test_a_pause_of_the_supervisors_beat_agent_explains_only_past_its_floor() -> None:
    """The beat agent sends the beats the detector judges: stopped, it silences them."""

    def agent_paused(until: float) -> list[Event]:
        history = [
            fault("process_paused", until, began=10.0, of_pid=43, target="beat_agent"),
            promotion(11.3, silent=1.1),
        ]
        return events_of(history)

    assert check_promotions_explained(agent_paused(until=11.1), EXACT) == []  # 1.1 s: past it
    [violation] = check_promotions_explained(agent_paused(until=10.7), EXACT)
    assert [(e.name, e.get("target")) for e in violation.lines] == [
        ("worker_promoted", None),
        ("process_paused", "beat_agent"),
    ]


@pytest.mark.parametrize(
    "not_a_cause",
    [
        fault("process_paused", 99.0, began=97.0, target="worker"),  # its worker, not itself
        fault("process_paused", 99.0, began=97.0, target="supervisor", supervisor="s2"),
        line("process_killed", 98.0, pid=9, target="nimbus", supervisor="s1"),
        line("process_killed", 40.0, pid=9, target="supervisor", supervisor="s1"),  # long over
        fault("host_cut", 105.0, began=100.5),  # began after the promotion
    ],
    ids=["worker-paused", "other-supervisor", "other-process", "long-before", "after"],
)
def test_only_a_failure_of_the_old_supervisor_during_its_silence_explains(
    not_a_cause: dict[str, Any],
) -> None:
    history = events_of([not_a_cause, promotion(100.0, silent=1.5)])
    assert len(check_promotions_explained(history, EXACT)) == 1


def test_a_planned_stop_and_a_run_without_promotions_pass() -> None:
    w1 = worker(1)
    quiet = [w1("worker_started", 0.0), w1("batch_committed", 1.0)]
    quiet += [fault("process_paused", 3.0, began=2.5, target="supervisor")]
    assert check_promotions_explained(events_of(quiet), EXACT) == []
    drained = [*quiet, promotion(5.0, silent=0.2, how="stopped")]
    assert check_promotions_explained(events_of(drained), EXACT) == []


def test_a_promotion_off_a_supervisor_whose_worker_had_stopped_before_its_silence_is_explained():
    """Its supervisor fenced the worker (its own lease lapsed when ZooKeeper lost its leader
    with another host, say): the pipeline was down there before the detector judged."""
    w1 = worker(1)
    started = w1("worker_started", 0.0, supervisor="s1")
    fenced = w1("worker_stopped", 8.0, supervisor="s1", state="STOPPED")
    # silent 1.0 s at 11.0: silent since 10.0, heard up to 1 s later (9.0)
    assert (
        check_promotions_explained(
            events_of([started, fenced, promotion(11.0, silent=1.0, how="fenced")]), EXACT
        )
        == []
    )
    again = w1("worker_started", 9.5, supervisor="s1")  # started again there: running
    assert (
        len(
            check_promotions_explained(
                events_of([started, fenced, again, promotion(11.0, silent=1.0)]), EXACT
            )
        )
        == 1
    )
    by_the_fence = w1("worker_stopped", 10.5, supervisor="s1", state="STOPPED")  # the lane's
    assert (
        len(
            check_promotions_explained(
                events_of([started, by_the_fence, promotion(11.0, silent=1.0, how="fenced")]), EXACT
            )
        )
        == 1
    )
    elsewhere = w1("worker_stopped", 8.0, supervisor="s3", state="STOPPED")
    assert (
        len(
            check_promotions_explained(
                events_of([started, elsewhere, promotion(11.0, silent=1.0)]), EXACT
            )
        )
        == 1
    )


def test_a_promotion_off_a_worker_that_stopped_and_started_again_cold_is_explained() -> None:
    """Its beat lease lapsed (a stall shorter than the floor), its supervisor started it
    again in place, and the leader fenced that start to promote the standby worker: the
    pipeline was down there since the stop, whatever the detector saw."""
    w1 = worker(1)
    w2 = worker(2)
    ran = [w1("worker_started", 0.0, supervisor="s1"), w1("batch_committed", 5.0, supervisor="s1")]
    lapsed = w1("worker_stopped", 8.0, supervisor="s1", state="STOPPED")
    again = w2("worker_started", 9.0, supervisor="s1")
    fenced = w2("worker_stopped", 11.5, supervisor="s1", state="STOPPED")
    cold = [*ran, lapsed, again, fenced, promotion(12.0, silent=0.0, how="fenced")]
    assert check_promotions_explained(events_of(cold), EXACT) == []
    # without the start in place, the stop is the fence's own: a running worker moved
    moved = [*ran, fenced, promotion(12.0, silent=0.0, how="fenced")]
    assert len(check_promotions_explained(events_of(moved), EXACT)) == 1
    # started again in place and not stopped by the promotion's fence: it may run
    assert len(check_promotions_explained(events_of(cold[:-2] + cold[-1:]), EXACT)) == 1
    # a batch committed by the start in place: it ran
    ran_again = [*cold[:-2], w2("batch_committed", 11.0, supervisor="s1"), *cold[-2:]]
    assert len(check_promotions_explained(events_of(ran_again), EXACT)) == 1


def test_a_promotion_off_a_worker_killed_and_started_again_cold_is_explained() -> None:
    """A killed worker writes no line: the injector's ``process_killed`` of it (its
    pipeline, its supervisor) is its stop. Its supervisor started it again in place, and the
    leader fenced that start to promote the standby worker."""
    w1, w2 = worker(1), worker(2)
    ran = [w1("worker_started", 0.0, supervisor="s1"), w1("batch_committed", 5.0, supervisor="s1")]
    killed = line(
        "process_killed", 8.0, pid=9, of_pid=1, target="worker", supervisor="s1", pipeline="p"
    )
    again = w2("worker_started", 9.0, supervisor="s1")
    fenced = w2("worker_stopped", 11.5, supervisor="s1", state="STOPPED")
    cold = [*ran, killed, again, fenced, promotion(12.0, silent=0.0, how="fenced")]
    assert check_promotions_explained(events_of(cold), EXACT) == []
    # fenced before its start in place wrote a line (a loaded host): down since the kill
    fenced_early = [*ran, killed, cold[-1]]
    assert check_promotions_explained(events_of(fenced_early), EXACT) == []
    of_another = [*ran, {**killed, "pipeline": "q"}, again, fenced, cold[-1]]
    assert len(check_promotions_explained(events_of(of_another), EXACT)) == 1
    ran_since = [*ran, killed, again, w2("batch_committed", 10.5, supervisor="s1"), *cold[-2:]]
    assert len(check_promotions_explained(events_of(ran_since), EXACT)) == 1


def test_a_cold_start_fenced_after_its_worker_stopped_is_explained_by_the_fences_ask() -> None:
    """The supervisor fenced itself (its lease lapsed in a ZooKeeper fault) and stopped its
    worker; the leader fenced its start in place before that start wrote a line, and says
    when it asked (``fence_asked_*``). A stop after the ask is the fence's own: a running
    worker moved."""
    w1 = worker(1)
    ran = [w1("worker_started", 0.0, supervisor="s1"), w1("batch_committed", 5.0, supervisor="s1")]
    stopped = w1("worker_stopped", 8.0, supervisor="s1", state="STOPPED")

    def fenced_at(asked: float) -> list[Event]:
        moved = promotion(9.0, silent=0.0, how="fenced", fence_asked_wall=asked)
        moved["fence_asked_mono"] = asked
        return events_of([*ran, stopped, moved])

    assert check_promotions_explained(fenced_at(8.5), EXACT) == []
    assert len(check_promotions_explained(fenced_at(7.5), EXACT)) == 1
    without = events_of([*ran, stopped, promotion(9.0, silent=0.0, how="fenced")])
    assert len(check_promotions_explained(without, EXACT)) == 1  # when it asked: unknown
