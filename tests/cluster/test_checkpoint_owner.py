"""The claim on a pipeline's checkpoint location (``worker/checkpoint_owner.py``): the highest
fencing token owns it, a lower one is refused at its claim or stopped at its next batch.

Pure file-system logic, on a local directory and on fsspec's in-memory file system (any
fsspec URL is a checkpoint root); races are run with real threads."""

from __future__ import annotations

import subprocess
import sys
import threading
import uuid
from pathlib import Path

import fsspec
import pytest

from stratus.api.records import FencingToken, QueryProgress, WorkerState
from stratus.worker import run_guard, sdp_run
from stratus.worker.checkpoint_owner import (
    OWNERS_DIR,
    CheckpointOwners,
    OwnerFence,
    owner_file_name,
    token_of,
)
from stratus.worker.heartbeat_file import HeartbeatReporter
from stratus.worker.outcome import FENCED_EXIT, Outcome
from stratus.worker.pipeline_context import PipelineContext
from stratus.worker.spec import SPEC_FILE, read_heartbeat
from stratus.worker.stop_request import StopRequest
from tests.harness.spark_packages import (
    example_package,
    passthrough_conf,
    passthrough_package,
    unpack,
    worker_spec,
)
from tests.harness.zkfixtures import wait_until


def token(zxid: int, era: int = 1_700_000_000_000) -> FencingToken:
    return FencingToken(era=era, zxid=zxid)


@pytest.fixture(params=["local", "memory"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A pipeline's checkpoint location: a local directory, or an fsspec URL."""
    if request.param == "local":
        return str(tmp_path / "checkpoints" / "etl")
    return f"memory://ck-{uuid.uuid4().hex}/etl"


def claims(location: str) -> list[int]:
    """The zxids of the claims present, in order."""
    fs, path = fsspec.core.url_to_fs(location)
    fs.invalidate_cache()
    names = fs.ls(f"{path}/{OWNERS_DIR}", detail=False)
    return sorted(t.zxid for name in names if (t := token_of(str(name))) is not None)


def progress(batch_id: int) -> QueryProgress:
    return QueryProgress(name="q", id="q-1", batch_id=batch_id)


def test_file_names_sort_as_their_tokens_do() -> None:
    ordered = [token(9, era=1), token(10, era=1), token(2, era=2), token(2**63, era=2)]
    names = [owner_file_name(t) for t in ordered]
    assert sorted(names) == names
    assert [token_of(f"/ck/{OWNERS_DIR}/{name}") for name in names] == ordered
    assert token_of("notes.txt") is None


def test_the_first_claim_owns_the_location(location: str) -> None:
    assert CheckpointOwners(location, token(5)).claim({"supervisor": "s1"}) is None
    assert claims(location) == [5]


def test_a_lower_claim_is_refused_naming_the_owner(location: str) -> None:
    assert CheckpointOwners(location, token(7)).claim() is None
    assert CheckpointOwners(location, token(5)).claim() == token(7)


def test_a_claim_of_an_older_cluster_does_not_fence_a_newer_one(location: str) -> None:
    """A new ZooKeeper starts its zxids again: the era (the assignments znode's creation)
    orders the clusters that used one checkpoint root in turn."""
    assert CheckpointOwners(location, token(90_000, era=1_000)).claim() is None
    newer = CheckpointOwners(location, token(12, era=2_000))
    assert newer.claim() is None
    assert newer.higher() is None


def test_a_restart_of_the_same_assignments_worker_owns_it_again(location: str) -> None:
    assert CheckpointOwners(location, token(5)).claim() is None
    assert CheckpointOwners(location, token(5)).claim() is None
    assert claims(location) == [5]


def test_the_owner_checks_and_finds_a_higher_claim(location: str) -> None:
    owner = CheckpointOwners(location, token(5))
    assert owner.claim() is None
    assert owner.higher() is None
    assert CheckpointOwners(location, token(8)).claim() is None
    assert owner.higher() == token(8)


def test_the_owner_prunes_all_but_the_newest_lower_claims_never_a_higher_one(
    location: str,
) -> None:
    for zxid in range(1, 7):
        CheckpointOwners(location, token(zxid), keep_lower=3).claim()
    assert claims(location) == [3, 4, 5, 6]  # the owner, and the newest 3 below it
    CheckpointOwners(location, token(20)).claim()
    assert claims(location) == [4, 5, 6, 20]
    assert CheckpointOwners(location, token(7), keep_lower=0).claim() == token(20)
    assert claims(location) == [4, 5, 6, 7, 20]  # refused: it prunes nothing
    CheckpointOwners(location, token(21), keep_lower=1).claim()
    assert claims(location) == [20, 21]


def race(lower: CheckpointOwners, upper: CheckpointOwners) -> dict[str, FencingToken | None]:
    """Both claim at once (released by one barrier); what each claim returned."""
    barrier = threading.Barrier(2)
    results: dict[str, FencingToken | None] = {}

    def claim(name: str, owners: CheckpointOwners) -> None:
        barrier.wait()
        results[name] = owners.claim()

    threads = [
        threading.Thread(target=claim, args=("lower", lower)),
        threading.Thread(target=claim, args=("upper", upper)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_two_claimers_at_once_the_higher_always_wins(tmp_path: Path) -> None:
    """Both write, then list. The higher is never refused; the lower is refused at its
    claim, or (it listed before the higher wrote) finds the higher at its next check."""
    for attempt in range(40):
        location = str(tmp_path / f"race-{attempt}" / "etl")
        lower = CheckpointOwners(location, token(10))
        upper = CheckpointOwners(location, token(11))
        results = race(lower, upper)
        assert results["upper"] is None
        assert results["lower"] in (None, token(11))
        assert lower.higher() == token(11)
        assert upper.higher() is None


def test_a_fenced_claim_is_a_fenced_outcome_that_does_not_start(location: str) -> None:
    CheckpointOwners(location, token(9)).claim()
    fence = OwnerFence(CheckpointOwners(location, token(3)), StopRequest(), location)
    outcome = fence.claim()
    assert outcome is not None
    assert outcome.state is WorkerState.FENCED
    assert outcome.exit_code == FENCED_EXIT
    assert outcome.error is not None
    assert "token 1700000000000-9" in outcome.error and location in outcome.error


def test_the_first_batch_after_a_higher_claim_stops_the_run_fenced(location: str) -> None:
    stop = StopRequest()
    fence = OwnerFence(CheckpointOwners(location, token(3)), stop, location)
    assert fence.claim() is None
    fence.batch_committed(progress(0))
    assert not stop.requested()
    CheckpointOwners(location, token(4)).claim()
    fence.batch_committed(progress(1))
    wait_until(stop.requested, 5.0, "the fenced worker's stop request")
    outcome = stop.outcome()
    assert outcome.state is WorkerState.FENCED
    assert outcome.exit_code == FENCED_EXIT
    assert fence.check() == outcome


def test_a_listing_that_fails_is_no_verdict(tmp_path: Path) -> None:
    location = str(tmp_path / "etl")
    stop = StopRequest()
    fence = OwnerFence(CheckpointOwners(location, token(3)), stop, location)
    assert fence.claim() is None
    (tmp_path / "etl" / OWNERS_DIR / owner_file_name(token(3))).unlink()
    (tmp_path / "etl" / OWNERS_DIR).rmdir()  # the listing raises FileNotFoundError
    assert fence.check() is None
    assert not stop.requested()


def test_a_worker_whose_checkpoint_a_newer_worker_claimed_exits_fenced_without_spark(
    tmp_path: Path,
) -> None:
    """The real worker entrypoint, as a supervisor starts it: the claim comes before Spark,
    so a stale order ends FENCED at once, with no JVM started and nothing run."""
    location = tmp_path / "checkpoints" / "passthrough"
    CheckpointOwners(str(location), token(9)).claim()
    code = unpack(passthrough_package(), tmp_path / "code")
    spec = worker_spec(
        tmp_path / "worker",
        "passthrough",
        code,
        checkpoint_location=str(location),
        conf=passthrough_conf(tmp_path / "input", tmp_path / "output"),
        token=token(4),
    )
    spec_path = tmp_path / "worker" / SPEC_FILE
    spec.write(spec_path)
    log = tmp_path / "worker.log"
    with (
        log.open("wb") as out,
        subprocess.Popen(
            [sys.executable, "-m", "stratus.worker.main", str(spec_path)],
            stdin=subprocess.PIPE,  # held open, as its supervisor holds it
            stderr=out,
            start_new_session=True,
        ) as process,
    ):
        process.wait(timeout=60)
    output = log.read_text(errors="replace")
    assert process.returncode == FENCED_EXIT, output
    beat = read_heartbeat(spec.heartbeat_path)
    assert beat is not None and beat.state is WorkerState.FENCED
    assert beat.error is not None and "token 1700000000000-9" in beat.error
    assert "event=worker_fenced at=claim" in output
    assert claims(str(location)) == [4, 9]
    assert not (location / "passthrough").exists()  # no query ever ran


def test_a_query_cannot_name_its_checkpoint_after_the_claims(tmp_path: Path) -> None:
    code = unpack(passthrough_package(), tmp_path / "code")
    spec = worker_spec(tmp_path / "w", "passthrough", code, checkpoint_location="/ck/etl")
    context = PipelineContext.from_spec(spec, threading.Event())
    assert context.checkpoint("counts") == "/ck/etl/counts"
    with pytest.raises(ValueError, match="holds the workers' claims"):
        context.checkpoint(f"{OWNERS_DIR}/counts")


def test_an_sdp_worker_checks_the_claims_before_each_run(tmp_path: Path, monkeypatch) -> None:
    """Its first run (a stand-in for ``spark-pipelines run``, under the real guard) is where
    a newer worker claims the location; the run that would follow never starts."""
    location = tmp_path / "checkpoints" / "sdp"
    code = unpack(example_package("sdp"), tmp_path / "code")
    spec = worker_spec(
        tmp_path / "worker",
        "sdp",
        code,
        checkpoint_location=str(location),
        trigger_interval_secs=0.01,
    )
    runs = tmp_path / "runs"
    newer = location / OWNERS_DIR / owner_file_name(token(9))
    stand_in = f"open({str(runs)!r}, 'a').write('run\\n'); open({str(newer)!r}, 'w').close()"
    command = [sys.executable, run_guard.__file__, "--", sys.executable, "-c", stand_in]
    monkeypatch.setattr(sdp_run, "sdp_command", lambda spec, spec_file: command)
    stop = StopRequest()
    reporter = HeartbeatReporter(spec)
    reporter.start()
    fence = OwnerFence(CheckpointOwners(str(location), spec.token), stop, str(location))
    assert fence.claim() is None
    outcomes: list[Outcome] = []
    thread = threading.Thread(
        target=lambda: outcomes.append(sdp_run.run_sdp(spec, stop, reporter, fence=fence))
    )
    thread.start()
    try:
        wait_until(lambda: outcomes, 60, "the sdp worker's end")
    finally:
        stop.request("the test is over")
        thread.join()
    [outcome] = outcomes
    assert outcome.state is WorkerState.FENCED, outcome
    assert runs.read_text() == "run\n"
    reporter.finish(outcome)
