"""The standby worker on real Spark, as a real process, as its supervisor starts it: READY with
its code imported and its session up, claiming nothing; promoted by the file its supervisor
writes, it claims the checkpoint with the promotion's token and runs the pipeline in the
session it prepared; stopped, orphaned, refused or fenced, it leaves with nothing claimed.

Each test starts at most one Spark: a JVM start costs seconds on a 2-core machine.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from stratus.api.records import ClusterIdentity, FencingToken, WorkerState
from stratus.api.standby_workers import StandbyWorkerState
from stratus.worker.checkpoint_origin import ORIGIN_FILE, CheckpointOrigin, record_origin
from stratus.worker.checkpoint_owner import OWNERS_DIR, CheckpointOwners, owner_file_name
from stratus.worker.lease_file import write_lease
from stratus.worker.outcome import FENCED_EXIT, OK_EXIT, REFUSED_EXIT, USAGE_EXIT
from stratus.worker.promotion import PROMOTE_FILE, StandbyReady, read_standby_ready, standby_file
from stratus.worker.spec import WorkerSpec
from stratus.worker.standby import ORPHAN_SECS
from tests.cluster.test_worker import rows_total_is
from tests.harness.spark_packages import (
    FIRST_TOKEN,
    PASSTHROUGH_QUERY,
    passthrough_conf,
    passthrough_package,
    read_ids,
    unpack,
    worker_spec,
    write_ids,
)
from tests.harness.worker_processes import STANDBY_MODULE, START_SECS, Worker, WorkerProcesses
from tests.harness.zkfixtures import wait_until

pytestmark = pytest.mark.spark

CLUSTER = ClusterIdentity.of("127.0.0.1:2181", "/prod")
PROMOTED_TOKEN = FencingToken(era=FIRST_TOKEN.era, zxid=FIRST_TOKEN.zxid + 10)


@pytest.fixture
def start_standby() -> Iterator[Callable[[WorkerSpec], Worker]]:
    """Start standby workers as a supervisor does; kill what is left of them after the test."""
    processes = WorkerProcesses()
    yield lambda spec: processes.start(spec, module=STANDBY_MODULE)
    processes.close()


def standby_spec(tmp_path: Path, **changes: Any) -> WorkerSpec:
    """A standby worker of the pass-through pipeline over tmp_path/input and tmp_path/output."""
    code = unpack(passthrough_package(), tmp_path / "code")
    spec = worker_spec(
        tmp_path / "standby",
        "passthrough",
        code,
        checkpoint_location=str(tmp_path / "checkpoints" / "passthrough"),
        conf=passthrough_conf(tmp_path / "input", tmp_path / "output"),
    )
    update = {"role": "standby", "promote_path": spec.work_dir / PROMOTE_FILE, "cluster": CLUSTER}
    return spec.model_copy(update={**update, **changes})


def promote(standby: WorkerSpec, **changes: Any) -> WorkerSpec:
    """Write the promotion its supervisor would: the active worker's spec, a new assignment's
    token, epoch and generation; the spec written."""
    assert standby.promote_path is not None
    update = {
        "role": "active",
        "promote_path": None,
        "token": PROMOTED_TOKEN,
        "epoch": standby.epoch + 1,
        "generation": standby.generation + 1,
    }
    promoted = standby.model_copy(update={**update, **changes})
    promoted.write(standby.promote_path)  # whole, by a rename, as its supervisor writes it
    return promoted


def wait_ready(standby: Worker) -> StandbyReady:
    """Its ``standby.json``, once written; fails early if the standby worker exits."""
    found: list[StandbyReady] = []

    def ready() -> bool:
        standby.jvms()
        record = read_standby_ready(standby.spec.work_dir)
        if record is not None:
            found.append(record)
            return True
        if standby.process.poll() is not None:
            raise AssertionError(f"the standby worker exited before READY:\n{standby.output()}")
        return False

    wait_until(ready, START_SECS, "the standby worker's standby.json")
    return found[0]


def claims(location: Path) -> list[str]:
    """The claims' files of a checkpoint location (none: the location was never claimed)."""
    owners = location / OWNERS_DIR
    if not owners.exists():
        return []
    return sorted(p.name for p in owners.iterdir() if p.name != ORIGIN_FILE)


def assert_left_without_a_claim(standby: Worker, exit_code: int) -> None:
    """It exited ``exit_code`` having written nothing a worker writes, its JVM gone."""
    assert standby.wait_exit() == exit_code, standby.output()
    location = Path(standby.spec.checkpoint_location)
    assert not location.exists(), sorted(location.rglob("*"))  # no claim, no query, no origin
    assert standby.heartbeat() is None  # never the pipeline's worker
    assert standby.jvms() == set()


def test_a_ready_standby_worker_claims_nothing_until_promoted_then_runs_in_its_session(
    tmp_path, start_standby
):
    """READY: standby.json, its JVM up, the input there and untouched, the location never
    written. Promoted: it claims with the promotion's token and runs the pipeline in the JVM
    it started, as the promoted assignment's worker; then it stops as any worker does."""
    write_ids(tmp_path / "input", range(10))
    spec = standby_spec(tmp_path)
    standby = start_standby(spec)
    ready = wait_ready(standby)
    assert ready.state is StandbyWorkerState.READY and ready.pid == standby.process.pid
    assert (ready.pipeline, ready.generation, ready.digest) == ("passthrough", 0, spec.digest)
    session_jvms = standby.jvms()
    assert session_jvms, "READY without a JVM"
    seen_until_ready = set(standby.seen_jvms)  # Spark's launcher too, gone since
    location = Path(spec.checkpoint_location)
    assert not location.exists() and claims(location) == []
    assert standby.heartbeat() is None and read_ids(tmp_path / "output") == []

    promoted = promote(spec)
    running = standby.wait_heartbeat(rows_total_is(10), "the 10 rows, once promoted")
    assert (running.epoch, running.generation) == (promoted.epoch, promoted.generation)
    assert running.pid == standby.process.pid
    assert claims(location) == [owner_file_name(PROMOTED_TOKEN)]
    assert (location / OWNERS_DIR / ORIGIN_FILE).is_file()
    assert read_ids(tmp_path / "output") == list(range(10))
    # no second Spark: the session prepared while READY runs the pipeline
    assert standby.jvms() == session_jvms and standby.seen_jvms == seen_until_ready
    assert not standby_file(spec.work_dir).exists()  # no longer READY
    assert "event=standby_worker_promoted" in standby.output()

    standby.process.send_signal(signal.SIGTERM)
    assert standby.wait_exit() == OK_EXIT, standby.output()
    final = standby.heartbeat()
    assert final is not None and final.state is WorkerState.STOPPED, final
    assert standby.jvms() == set()


def test_a_promotion_that_finds_a_higher_claim_ends_fenced_without_a_batch(tmp_path, start_standby):
    """Between its READY and its promotion a newer worker claimed the checkpoint: its claim
    sees the higher token, it ends FENCED (exit 3) and no query ever runs."""
    write_ids(tmp_path / "input", range(10))
    spec = standby_spec(tmp_path)
    standby = start_standby(spec)
    wait_ready(standby)
    higher = FencingToken(era=PROMOTED_TOKEN.era, zxid=PROMOTED_TOKEN.zxid + 1)
    location = Path(spec.checkpoint_location)
    assert CheckpointOwners(str(location), higher).claim() is None

    promote(spec)
    assert standby.wait_exit(START_SECS) == FENCED_EXIT, standby.output()
    final = standby.heartbeat()
    assert final is not None and final.state is WorkerState.FENCED, final
    assert final.error is not None and f"token {higher}" in final.error
    assert claims(location) == sorted(map(owner_file_name, [PROMOTED_TOKEN, higher]))
    assert not (location / PASSTHROUGH_QUERY).exists()  # no batch: no query ran
    assert read_ids(tmp_path / "output") == []
    assert "event=worker_fenced at=claim" in standby.output()
    assert standby.jvms() == set()


def test_a_standby_worker_stopped_before_its_promotion_leaves_without_a_claim(
    tmp_path, start_standby
):
    standby = start_standby(standby_spec(tmp_path))
    wait_ready(standby)
    standby.process.send_signal(signal.SIGTERM)
    assert_left_without_a_claim(standby, OK_EXIT)
    assert "event=standby_worker_stopped phase=READY reason=SIGTERM" in standby.output()


def test_an_orphaned_standby_worker_leaves_without_a_claim(tmp_path, start_standby):
    """Its supervisor's lease has been over for longer than ORPHAN_SECS (a shorter lapse
    keeps it, ``test_standby_lease_lapse``): it leaves at its first look, whatever its
    phase."""
    lease = tmp_path / "lease"
    write_lease(lease, until=0.0)  # lapsed, and not written since
    long_ago = time.time() - ORPHAN_SECS - 1.0
    os.utime(lease, (long_ago, long_ago))
    standby = start_standby(standby_spec(tmp_path, lease_path=lease))
    assert_left_without_a_claim(standby, OK_EXIT)
    assert "lease ended" in standby.output()
    assert not standby_file(standby.spec.work_dir).exists()


def test_a_promotion_of_other_code_is_refused_and_nothing_is_claimed(tmp_path, start_standby):
    spec = standby_spec(tmp_path)
    standby = start_standby(spec)
    wait_ready(standby)
    promote(spec, digest="f" * 64)
    assert_left_without_a_claim(standby, USAGE_EXIT)
    output = standby.output()
    assert "event=promotion_refused" in output
    assert f"is refused: it runs code {'f' * 12}, this standby worker imported" in output


def test_a_checkpoint_of_another_cluster_is_refused_before_the_standby_worker_starts_spark(
    tmp_path, start_standby
):
    """The location holds another cluster's checkpoints: refused while PREPARING, read only,
    exit 4 (not restarted), no JVM, nothing written there."""
    spec = standby_spec(tmp_path)
    location = Path(spec.checkpoint_location)
    (location / OWNERS_DIR).mkdir(parents=True)
    other = ClusterIdentity.of("127.0.0.1:2181", "/staging")
    record_origin(str(location), CheckpointOrigin.now(other, "passthrough", FIRST_TOKEN.era + 1))
    before = sorted(location.rglob("*"))

    standby = start_standby(spec)
    assert standby.wait_exit() == REFUSED_EXIT, standby.output()
    assert standby.seen_jvms == set()
    assert sorted(location.rglob("*")) == before
    assert f"event=checkpoint_refused location={location}" in standby.output()
    assert "root /staging" in standby.output()
    assert read_standby_ready(spec.work_dir) is None
