"""The leader's next step for a recorded purge (``purge_plan.next_step``): pure logic, no I/O.

One test per rule: who is chosen (deterministically, among the live supervisors), when the
next one is (an error, a death, silence), when the leader tries itself, when the purge is
reported FAILED with every reason and when it is tried again, and that only an answer
saying done completes it.
"""

from __future__ import annotations

from stratus.api.purges import FailedAttempt, PurgeCause, PurgeOrder, PurgeOutcome, PurgeState
from stratus.nimbus.records.purge_plan import (
    PurgeBy,
    PurgeRules,
    StepKind,
    next_step,
    record_failure,
)

NOW = 1_000_000.0
HERE = "nimbus n1:6627"


def rules(by: PurgeBy = PurgeBy.SUPERVISOR, *, reaches: bool = False) -> PurgeRules:
    return PurgeRules(by=by, here=HERE, here_reaches=reaches, answer_secs=300.0, retry_secs=60.0)


def order(**changes: object) -> PurgeOrder:
    base = PurgeOrder(pipeline="etl", root="/ck", cause=PurgeCause.KILL, requested=NOW, epoch=3)
    return base.model_copy(update=changes)


def answer(of: PurgeOrder, supervisor: str, error: str | None = None) -> PurgeOutcome:
    return PurgeOutcome(
        pipeline=of.pipeline,
        order=of.id,
        attempt=of.attempt,
        supervisor=supervisor,
        done=error is None,
        error=error,
        time=NOW,
    )


def handed(of: PurgeOrder, live: list[str], now: float = NOW) -> PurgeOrder:
    step = next_step(of, [], live=live, now=now, rules=rules())
    assert step.kind is StepKind.WRITE and step.order is not None
    return step.order


def test_a_purge_is_handed_to_one_live_supervisor_whatever_the_order_they_are_listed_in():
    first = handed(order(), ["s1", "s2", "s3"])
    again = handed(order(), ["s3", "s1", "s2"])
    assert first.supervisor == again.supervisor and first.supervisor in {"s1", "s2", "s3"}
    assert (first.attempt, first.handed, first.state) == (1, NOW, PurgeState.PENDING)


def test_different_pipelines_spread_over_the_supervisors():
    chosen = {handed(order(pipeline=f"p{n}"), ["s1", "s2", "s3"]).supervisor for n in range(30)}
    assert chosen == {"s1", "s2", "s3"}


def test_the_supervisor_at_work_is_waited_for():
    current = handed(order(), ["s1", "s2"])
    step = next_step(current, [], live=["s1", "s2"], now=NOW + 10, rules=rules())
    assert step.kind is StepKind.WAIT


def test_an_answer_saying_done_completes_the_purge():
    current = handed(order(), ["s1", "s2"])
    assert current.supervisor is not None
    done = answer(current, current.supervisor)
    step = next_step(current, [done], live=["s1", "s2"], now=NOW, rules=rules())
    assert step.kind is StepKind.DONE and step.by == f"supervisor {current.supervisor}"


def test_a_failed_answer_hands_the_purge_to_another_supervisor_keeping_the_reason():
    current = handed(order(), ["s1", "s2"])
    assert current.supervisor is not None
    failed = answer(current, current.supervisor, "PermissionError: denied")
    step = next_step(current, [failed], live=["s1", "s2"], now=NOW, rules=rules())
    assert step.kind is StepKind.WRITE and step.order is not None
    assert step.order.supervisor not in {None, current.supervisor}
    assert step.order.attempt == 2
    assert step.order.failed == [
        FailedAttempt(
            by=f"supervisor {current.supervisor}", attempt=1, error="PermissionError: denied"
        )
    ]


def test_a_supervisor_that_dies_or_stays_silent_is_replaced():
    current = handed(order(), ["s1", "s2"])
    other = ({"s1", "s2"} - {current.supervisor}).pop()
    died = next_step(current, [], live=[other], now=NOW + 1, rules=rules())
    assert died.kind is StepKind.WRITE and died.order is not None
    assert died.order.supervisor == other and "unregistered" in died.order.failed[0].error

    silent = next_step(current, [], live=["s1", "s2"], now=NOW + 301, rules=rules())
    assert silent.kind is StepKind.WRITE and silent.order is not None
    assert silent.order.supervisor == other and "no answer in 300s" in silent.order.failed[0].error


def test_when_every_live_supervisor_failed_the_purge_is_failed_with_every_reason():
    current = handed(order(), ["s1"])
    failed = answer(current, "s1", "OSError: read-only file system")
    step = next_step(current, [failed], live=["s1"], now=NOW, rules=rules())
    assert step.kind is StepKind.WRITE and step.order is not None
    assert step.order.state is PurgeState.FAILED and step.order.supervisor is None
    assert step.order.reason is not None and "read-only file system" in step.order.reason
    assert step.order.retry_at == NOW + 60

    waiting = next_step(step.order, [failed], live=["s1"], now=NOW + 59, rules=rules())
    assert waiting.kind is StepKind.WAIT
    again = next_step(step.order, [failed], live=["s1"], now=NOW + 60, rules=rules())
    assert again.kind is StepKind.WRITE and again.order is not None
    assert (again.order.supervisor, again.order.state) == ("s1", PurgeState.PENDING)


def test_with_no_live_supervisor_the_purge_waits_saying_why():
    step = next_step(order(), [], live=[], now=NOW, rules=rules())
    assert step.kind is StepKind.WRITE and step.order is not None
    assert step.order.state is PurgeState.PENDING
    assert "no live supervisor" in (step.order.reason or "")
    assert next_step(step.order, [], live=[], now=NOW + 5, rules=rules()).kind is StepKind.WAIT


def test_auto_tries_the_leader_first_where_it_reaches_the_directory_then_a_supervisor():
    auto = rules(PurgeBy.AUTO, reaches=True)
    assert next_step(order(), [], live=["s1"], now=NOW, rules=auto).kind is StepKind.TRY_HERE
    after = record_failure(order(), HERE, "PermissionError: denied")
    step = next_step(after, [], live=["s1"], now=NOW, rules=auto)
    assert step.kind is StepKind.WRITE and step.order is not None
    assert step.order.supervisor == "s1"

    elsewhere = rules(PurgeBy.AUTO, reaches=False)  # not on its file system: the supervisors'
    assert next_step(order(), [], live=["s1"], now=NOW, rules=elsewhere).kind is StepKind.WRITE


def test_nimbus_mode_never_hands_over_and_fails_with_the_leaders_reason():
    by_nimbus = rules(PurgeBy.NIMBUS)
    assert next_step(order(), [], live=["s1"], now=NOW, rules=by_nimbus).kind is StepKind.TRY_HERE
    after = record_failure(order(), HERE, "PermissionError: denied")
    step = next_step(after, [], live=["s1"], now=NOW, rules=by_nimbus)
    assert step.kind is StepKind.WRITE and step.order is not None
    assert step.order.state is PurgeState.FAILED and step.order.supervisor is None
    assert "nimbus n1:6627: PermissionError: denied" in (step.order.reason or "")
