"""A hot pipeline's held update withdrawn when its standby worker failed it: the pure verdict
(``withdrawal``) and the record it leads to (``rollback_changes`` with the running
assignment's generation).

Unless a test says otherwise, pipeline "etl" ran version 1 (generation 0) and was updated to
version 2 (generation 1), held: its assignment still runs version 1.
"""

from __future__ import annotations

from typing import Any

import pytest

from stratus.api.records import Assignment, PipelineRecord, PipelineStatus
from stratus.api.standby_workers import StandbyWorkerBeat, StandbyWorkerState
from stratus.nimbus.failover.update_withdrawal import Withdraw, withdrawal
from stratus.nimbus.records.kept_versions import rollback_changes, runs
from stratus.nimbus.scheduling.scheduler import assignment_of
from tests.unit.test_update_trial import kept, record

UPDATED = record(2)
RAN = UPDATED.model_copy(update=runs(kept(1)))


def running(rec: PipelineRecord = RAN) -> Assignment:
    """The assignment of the version that runs, on s1."""
    return assignment_of(rec.name, rec, "s1", epoch=1, now=1.0)


def standby(
    state: StandbyWorkerState = StandbyWorkerState.FAILED,
    rec: PipelineRecord = UPDATED,
    **fields: Any,
) -> StandbyWorkerBeat:
    """What s2 reports of the standby worker of ``rec``'s generation and code."""
    values: dict[str, Any] = {
        "pipeline": rec.name,
        "generation": rec.generation,
        "digest": rec.digest,
        "state": state,
        "since": 2.0,
        "error": "ModuleNotFoundError: No module named 'regions'",
    }
    return StandbyWorkerBeat(**{**values, **fields})


def test_a_held_update_whose_standby_worker_failed_is_withdrawn_to_the_running_generation():
    assert (RAN.generation, UPDATED.generation) == (0, 1)

    verdict = withdrawal(UPDATED, running(), standby())

    assert verdict == Withdraw(
        generation=1,
        runs_as=0,
        why="its standby worker failed for it, its running worker was not touched: "
        "ModuleNotFoundError: No module named 'regions'",
    )


def test_the_withdrawn_record_asks_for_exactly_the_assignment_that_runs():
    verdict = withdrawal(UPDATED, running(), standby())
    assert verdict is not None

    changes = rollback_changes(
        UPDATED, kept(1), verdict.why, now=5.0, keep=5, generation=verdict.runs_as
    )
    back = UPDATED.model_copy(update=changes)

    assert (back.version, back.generation, back.on_trial) == (1, 0, False)
    assert back.status is PipelineStatus.ACTIVE and back.generation_cause == "rolled_back"
    assert back.reason == f"rolled back from version 2 to 1: {verdict.why}"
    again = assignment_of(back.name, back, "s1", epoch=1, now=1.0)
    assert again == running()  # the round rewrites nothing: the worker is not touched


@pytest.mark.parametrize(
    "state",
    [
        StandbyWorkerState.FETCHING,
        StandbyWorkerState.STARTING,
        StandbyWorkerState.READY,
        StandbyWorkerState.REFUSED,  # no memory says nothing of the code
    ],
)
def test_a_standby_worker_that_did_not_fail_withdraws_nothing(state):
    assert withdrawal(UPDATED, running(), standby(state)) is None


def test_a_failure_of_another_generation_or_code_withdraws_nothing():
    assert withdrawal(UPDATED, running(), standby(generation=0)) is None
    assert withdrawal(UPDATED, running(), standby(digest="0" * 64)) is None
    assert withdrawal(UPDATED, running(), None) is None


def test_an_update_applied_already_is_left_to_its_own_workers_trial():
    assert withdrawal(UPDATED, running(UPDATED), standby()) is None


def test_a_proven_or_inactive_version_is_not_withdrawn():
    assert withdrawal(UPDATED.model_copy(update={"on_trial": False}), running(), standby()) is None
    inactive = UPDATED.model_copy(update={"status": PipelineStatus.INACTIVE})
    assert withdrawal(inactive, running(), standby()) is None


def test_with_no_version_before_it_kept_there_is_nothing_to_go_back_to():
    alone = UPDATED.model_copy(update={"versions": [kept(2)]})
    assert withdrawal(alone, running(), standby()) is None


def test_an_assignment_of_other_code_or_conf_than_the_version_before_withdraws_nothing():
    # version 3 held, the one before it 2, while the assignment still runs version 1
    third = record(3)
    runs_first = running(third.model_copy(update=runs(kept(1))))
    assert withdrawal(third, runs_first, standby(rec=third)) is None
    other_conf = running().model_copy(update={"conf": {"spark.sql.shuffle.partitions": "4"}})
    assert withdrawal(UPDATED, other_conf, standby()) is None


def test_a_generation_the_version_before_cannot_have_is_refused():
    with pytest.raises(ValueError, match="cannot have generation"):
        rollback_changes(UPDATED, kept(2), "why", now=5.0, keep=5, generation=0)
