"""The pipeline fence's pure parts: the request's bounds, the holds that keep a fenced pipeline
from starting again for the assignment it was fenced under, the supervisor's control loop fed
the order by hand (with fakes), and the leader's side of the call (its body, its answer)."""

from __future__ import annotations

import os

import pytest
from pydantic import ValidationError

from stratus.api.records import (
    MAX_FENCED_PIPELINES,
    ClusterIdentity,
    FencingToken,
    PipelineFenceAnswer,
    PipelineFenceRequest,
)
from stratus.nimbus.scheduling.supervisor_fencing import pipeline_fence_request, pipelines_gone
from stratus.process import boot_id, start_time
from stratus.security.roles import Role
from stratus.supervisor.adoption import Pid, ProcessRecord
from stratus.supervisor.assignment_reader import AssignmentsRead
from stratus.supervisor.endpoint import PIPELINE_FENCE_PATH, audited_call, required_role
from stratus.supervisor.loop_messages import (
    Adopted,
    FenceVerdict,
    HeartbeatWritten,
    PipelineFenceOrder,
)
from stratus.supervisor.managed_worker import Phase
from stratus.supervisor.pipeline_fence import PipelineHolds
from tests.harness.supervisor_fakes import (
    DIGEST,
    FakeClock,
    FakeLauncher,
    FakeProcess,
    assignment,
)
from tests.unit.test_adoption_unit import control_loop, feed

# ---------------------------------------------------------------------- the request's bounds


def request(**changes: object) -> PipelineFenceRequest:
    body: dict[str, object] = {"epoch": 3, "supervisor": "s1", "pipelines": ["etl"], **changes}
    return PipelineFenceRequest.model_validate(body)


def test_a_pipeline_fence_names_one_to_1024_pipelines_each_once() -> None:
    assert request().pipelines == ["etl"]
    most = [f"p{i}" for i in range(MAX_FENCED_PIPELINES)]
    assert len(request(pipelines=most).pipelines) == MAX_FENCED_PIPELINES == 1024
    with pytest.raises(ValidationError, match="at least 1 item"):
        request(pipelines=[])
    with pytest.raises(ValidationError, match="at most 1024 items"):
        request(pipelines=[*most, "one-more"])
    with pytest.raises(ValidationError, match=r"name each pipeline once \(etl more than once\)"):
        request(pipelines=["etl", "web", "etl"])


def test_a_pipeline_fence_refuses_bad_names_ids_epochs_and_fields() -> None:
    with pytest.raises(ValidationError, match=r"pipelines\.0[\s\S]*letters, digits"):
        request(pipelines=["../etc"])
    with pytest.raises(ValidationError, match="pipelines"):
        request(pipelines="etl")  # one name, not a list
    with pytest.raises(ValidationError, match="supervisor"):
        request(supervisor="")
    with pytest.raises(ValidationError, match="at most 100 characters"):
        request(supervisor="s" * 101)
    with pytest.raises(ValidationError, match="epoch"):
        request(epoch=-1)
    with pytest.raises(ValidationError, match="epoch"):
        request(epoch="3")  # strict: a number, not a string
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        request(stop="everything")


def test_a_pipeline_fence_needs_admin_and_is_audited_as_fence_pipelines() -> None:
    assert PIPELINE_FENCE_PATH == "/api/v1/fence/pipelines"
    assert required_role("POST", PIPELINE_FENCE_PATH) is Role.ADMIN
    assert required_role("POST", "/api/v1/fence") is Role.ADMIN
    assert audited_call("POST", PIPELINE_FENCE_PATH) == ("fence-pipelines", None)
    assert audited_call("POST", "/api/v1/fence") == ("fence", None)


# ---------------------------------------------------------------------- the holds


def token(zxid: int) -> FencingToken:
    return FencingToken(era=1, zxid=zxid)


def test_a_held_pipeline_is_left_out_until_an_assignment_with_a_newer_token() -> None:
    holds = PipelineHolds("s1")
    read = {"etl": assignment(zxid=5), "web": assignment("web", zxid=6)}
    assert holds.admit(read) == read
    assert holds.hold("etl", token(4))  # held at the newest known: the read's 5
    assert holds.held == {"etl": token(5)}
    assert set(holds.admit(read)) == {"web"}  # the same assignment read again
    assert set(holds.admit({**read, "etl": assignment(epoch=2, zxid=5)})) == {"web"}
    newer = {**read, "etl": assignment(zxid=9)}  # the leader rewrote it
    assert holds.admit(newer) == newer
    assert holds.held == {}


def test_a_read_without_the_pipeline_releases_its_hold_and_an_unknown_one_is_not_held() -> None:
    holds = PipelineHolds("s1")
    holds.admit({"etl": assignment(zxid=5)})
    assert holds.hold("etl")
    assert holds.admit({}) == {}  # moved away: any later assignment here is a later write
    assert holds.held == {}
    assert not holds.hold("never-read-here")
    assert holds.held == {}


# ---------------------------------------------------------------------- the control loop


def fence(epoch: int, *pipelines: str) -> PipelineFenceOrder:
    return PipelineFenceOrder(epoch, frozenset(pipelines))


def test_a_pipeline_fence_stops_only_its_workers_keeps_the_lease_and_answers_once_gone(
    tmp_path,
) -> None:
    clock, launcher = FakeClock(100.0), FakeLauncher(tmp_path)
    loop = control_loop(tmp_path, clock, launcher)
    both = {"a": assignment("a", zxid=3), "b": assignment("b", zxid=4)}
    feed(loop, HeartbeatWritten(100.0), AssignmentsRead(100.1, both))
    lease_ends = loop._lease.ends_at()
    a, b = launcher.processes
    order = fence(1, "a")
    feed(loop, order)
    assert (a.signals, b.signals) == (["TERM"], [])
    assert order.verdict is FenceVerdict.PENDING  # a's process still runs
    a.exit_code = 0
    feed(loop)
    assert order.wait(0) is FenceVerdict.STOPPED and order.stopped == ["a"]
    assert set(loop.workers) == {"b"} and loop.workers["b"].phase is Phase.RUNNING
    assert loop._lease.ends_at() == lease_ends and loop._lease.fences == 0

    feed(loop, HeartbeatWritten(clock()), AssignmentsRead(clock() + 0.1, both))
    assert len(launcher.processes) == 2 and set(loop.workers) == {"b"}  # the same: held back
    moved_back = {**both, "a": assignment("a", zxid=8)}  # a newer token: it runs again
    feed(loop, AssignmentsRead(clock() + 0.2, moved_back))
    assert len(launcher.processes) == 3 and set(loop.workers) == {"a", "b"}


def test_a_pipeline_fence_of_an_older_epoch_than_seen_is_refused_and_stops_nothing(
    tmp_path,
) -> None:
    clock, launcher = FakeClock(100.0), FakeLauncher(tmp_path)
    loop = control_loop(tmp_path, clock, launcher)
    feed(loop, HeartbeatWritten(100.0), AssignmentsRead(100.1, {"etl": assignment(epoch=5)}))
    stale = fence(4, "etl")
    feed(loop, stale)
    assert stale.wait(0) is FenceVerdict.REFUSED and stale.newest_epoch == 5
    assert launcher.last.signals == [] and loop.workers["etl"].phase is Phase.RUNNING
    feed(loop, fence(7, "nothing-here"))  # obeyed: a newer term, though nothing runs
    late = fence(6, "etl")  # older than the term that fenced last
    feed(loop, late)
    assert late.verdict is FenceVerdict.REFUSED and late.newest_epoch == 7
    assert launcher.last.signals == []


def test_a_pipeline_fence_of_nothing_running_here_is_answered_at_once(tmp_path) -> None:
    clock, launcher = FakeClock(100.0), FakeLauncher(tmp_path)
    loop = control_loop(tmp_path, clock, launcher)
    order = fence(1, "elsewhere")
    feed(loop, order)
    assert order.wait(0) is FenceVerdict.STOPPED and order.stopped == []


def test_a_worker_left_running_by_a_previous_supervisor_is_stopped_by_a_pipeline_fence(
    tmp_path,
) -> None:
    me = Pid(pid=os.getpid(), start=start_time(os.getpid()))
    left = ProcessRecord(
        supervisor="s1",
        cluster=ClusterIdentity.of("zk1:2181", "/stratus"),
        pipeline="etl",
        epoch=1,
        generation=0,
        token=token(1),
        digest=DIGEST,
        monitor=me,
        worker=me,
        boot_id=boot_id(),
    )
    clock, launcher = FakeClock(100.0), FakeLauncher(tmp_path)
    process = FakeProcess(11)
    loop = control_loop(tmp_path, clock, launcher, etl=Adopted(left, process))
    order = fence(1, "etl")
    feed(loop, order)  # before the first read: not adopted yet
    assert process.signals == ["TERM"] and order.verdict is FenceVerdict.PENDING
    process.exit_code = -15
    feed(loop)
    assert order.wait(0) is FenceVerdict.STOPPED and order.stopped == ["etl"]
    feed(loop, HeartbeatWritten(clock()), AssignmentsRead(clock() + 0.1, {"etl": assignment()}))
    assert launcher.processes == [] and "etl" not in loop.workers  # its token: held back


# ---------------------------------------------------------------------- the leader's side


def test_the_leaders_request_names_each_pipeline_once_in_order() -> None:
    body = pipeline_fence_request("s1", ["web", "etl", "web"], 7)
    assert body == PipelineFenceRequest(epoch=7, supervisor="s1", pipelines=["etl", "web"])
    with pytest.raises(ValueError, match="at least 1 item"):
        pipeline_fence_request("s1", [], 7)


def test_only_an_answer_for_this_supervisor_term_and_these_pipelines_counts() -> None:
    asked = pipeline_fence_request("s1", ["etl", "web"], 7)

    def answer(**changes: object) -> bytes:
        values: dict[str, object] = {
            "supervisor": "s1",
            "epoch": 7,
            "pipelines": ["etl", "web"],
            "stopped": ["etl"],
            **changes,
        }
        return PipelineFenceAnswer.model_validate(values).model_dump_json().encode()

    assert pipelines_gone(answer(), asked)
    assert not pipelines_gone(answer(supervisor="s2"), asked)
    assert not pipelines_gone(answer(epoch=6), asked)
    assert not pipelines_gone(answer(pipelines=["etl"]), asked)
    assert not pipelines_gone(b'{"supervisor": "s1", "epoch": 7, "stopped": []}', asked)
    assert not pipelines_gone(b"<html>a proxy's page</html>", asked)
