"""End to end with ``cluster.state.store = pacemaker``: two real pacemakers, a nimbus, two
supervisors and a streaming pipeline on real Spark, one cluster for both scenarios.

What is proved: one pacemaker killed and restarted empty moves nothing (the assignment
record, its epoch and the worker's process stay the same while the restarted pacemaker fills
up again); then the supervisor running the pipeline is killed with SIGKILL, and the
pipeline moves to the other one, every record delivered once.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from stratus.pacemaker.blocking import BlockingPacemakerPool
from stratus.pacemaker.settings import PacemakerClientSettings
from stratus.state.rounds import decode_round
from tests.harness.pacemaker_process import PacemakerProcess
from tests.harness.pipeline_cluster import pipeline_cluster
from tests.harness.spark_packages import passthrough_conf, passthrough_package, read_ids, write_ids
from tests.harness.zkfixtures import process_gone, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.timeout(480)]
OUTPUT_SECS = 120.0
SUPERVISOR_TIMEOUT_SECS = 4.0  # tests/harness/pipeline_cluster.py
PULSE_TTL_SECS = 90  # above nimbus.task.timeout.secs (60) of tests/harness/pipeline_cluster.py


@pytest.fixture
def pacemakers(tmp_path: Path) -> Iterator[list[PacemakerProcess]]:
    started = [
        PacemakerProcess(tmp_path, [f"pacemaker.pulse.ttl.secs={PULSE_TTL_SECS}"]).start()
        for _ in range(2)
    ]
    yield started
    for pacemaker in started:
        pacemaker.kill()


def pacemaker_options(pacemakers: list[PacemakerProcess]) -> list[str]:
    servers = ",".join(f"127.0.0.1:{p.port}" for p in pacemakers)
    return [
        "-c", "cluster.state.store=pacemaker",
        "-c", f"pacemaker.servers={servers}",
        "-c", f"pacemaker.pulse.ttl.secs={PULSE_TTL_SECS}",
        "-c", "pacemaker.client.timeout.secs=1",
    ]  # fmt: skip


def worker_beat_on(pacemaker: PacemakerProcess, supervisor: str, pipeline: str) -> bool:
    """Whether this one pacemaker holds the worker's heartbeat (written since it started)."""
    settings = PacemakerClientSettings(servers=(pacemaker.address,), timeout_secs=5.0)
    pool = BlockingPacemakerPool(settings, call_timeout_secs=10.0)
    try:
        pulse = pool.get_pulse(f"/supervisors/{supervisor}").value  # the supervisor's round
        return (
            pulse is not None
            and pipeline in decode_round(supervisor, pulse.data).unpacked().workers
        )
    finally:
        pool.close()


def test_a_restarted_empty_pacemaker_moves_nothing_and_a_killed_supervisor_moves_its_pipeline(
    zk_hosts, tmp_path, request, pacemakers
):
    extra = pacemaker_options(pacemakers)
    with pipeline_cluster(zk_hosts, tmp_path, request.node.name, extra=extra) as cluster:
        output = tmp_path / "pt-out"
        cluster.client.submit(
            "pt", passthrough_package("pt"), passthrough_conf(tmp_path / "pt-in", output)
        )
        first = cluster.wait_running("pt")
        write_ids(tmp_path / "pt-in", range(0, 30))
        wait_until(lambda: read_ids(output) == list(range(30)), OUTPUT_SECS, "ids 0-29 once")
        assignment = cluster.workers("pt").assignment
        assert assignment is not None

        # One pacemaker killed, then restarted empty: nothing moves.
        restarted = pacemakers[0]
        restarted.kill()
        restarted.start()  # the same port, no pulse in it
        wait_until(
            lambda: worker_beat_on(restarted, first.supervisor, "pt"),
            30,
            "the supervisor to write to the restarted pacemaker again",
        )
        watch_until = time.monotonic() + 2.5 * SUPERVISOR_TIMEOUT_SECS
        while time.monotonic() < watch_until:  # longer than a supervisor timeout
            assert cluster.workers("pt").assignment == assignment  # same record, same epoch
            time.sleep(0.25)
        still = cluster.running_on("pt")
        assert still is not None and (still.supervisor, still.pid) == (first.supervisor, first.pid)

        # The supervisor running it killed: the pipeline moves, every record once.
        cluster.supervisors[first.supervisor].signal(signal.SIGKILL)
        write_ids(tmp_path / "pt-in", range(30, 60))
        moved = cluster.wait_running("pt", not_on=first.supervisor)

        assert first.pid is not None and process_gone(first.pid)
        new = cluster.workers("pt").assignment
        assert new is not None and new.supervisor != assignment.supervisor
        assert moved.epoch >= first.epoch
        wait_until(lambda: read_ids(output) == list(range(60)), OUTPUT_SECS, "ids 0-59 once")
