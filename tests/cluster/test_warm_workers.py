"""Warm workers (``supervisor.worker.warm``): a pipeline starts in a process whose Spark is up.

The run's supervisors keep no warm worker by default (``tests/conftest.py``): these set
``supervisor.worker.warm.memory.mb``; the defaults are ``test_warm_defaults``'s.

The choice between a warm and a cold start is pure logic (``cold_reason``). The pool's
scenarios run an in-process ``Supervisor`` on a real ZooKeeper with real processes: a
stand-in warm worker (the warm contract in milliseconds: a spec path on stdin, then the
worker's heartbeats under its own pid) and the stand-in cold worker of ``test_supervisor``.
One scenario runs a ``stratus supervisor`` process with the real warm worker on Spark, end
to end: the pipeline runs in the warm pid, rows pass, and a SIGKILLed supervisor leaves
nothing behind.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from stratus.api.records import WorkerState
from stratus.config import StratusConfig
from stratus.local.processes import SupervisorProcess
from stratus.supervisor.code_cache import PipelineCode
from stratus.supervisor.daemon import Supervisor
from stratus.supervisor.settings import SpecSettings, SupervisorSettings
from stratus.supervisor.warm_pool import cold_reason
from stratus.supervisor.worker_process import START_MARK, WorkerPaths, build_spec
from stratus.worker.session_conf import is_runtime_key, static_mismatch
from stratus.worker.spec import WorkerSpec, warm_ready_file
from tests.cluster.test_supervisor import SPARK, SPARK_SECS, Cluster, all_gone, descendants
from tests.harness.spark_packages import passthrough_conf, passthrough_package, read_ids, write_ids
from tests.harness.supervisor_fakes import assignment, code, newest_run_log
from tests.harness.zkfixtures import kazoo_client, process_gone, wait_until

MASTER = "local[1]"
WARM_BUDGET_MB = 4096  # room for two warm workers at their estimate before they are measured

WARM_STAND_IN = '''
"""A stand-in warm worker: waits for a spec path on stdin, then heartbeats RUNNING as the
pipeline's worker under its own pid until SIGTERM; EOF before a hand-over ends it."""
import os, signal, sys, threading, time
from pathlib import Path

from stratus.api.records import WorkerHeartbeat, WorkerState
from stratus.worker.spec import WorkerSpec, write_heartbeat

Path(f"ready-{os.getpid()}").touch()  # its Spark would be up now
print(f"warm stand-in waiting pid={os.getpid()}", flush=True)
line = b""
while not line.endswith(b"\\n"):
    data = os.read(0, 4096)
    if not data:
        sys.exit(0)
    line += data
spec = WorkerSpec.read(Path(line.decode().strip()))
print(f"warm stand-in runs {spec.pipeline} pid={os.getpid()}", flush=True)
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
threading.Thread(target=lambda: (os.read(0, 1), os._exit(3)), daemon=True).start()
started = time.time()


def beat(state):
    write_heartbeat(spec.heartbeat_path, WorkerHeartbeat(
        pipeline=spec.pipeline, supervisor=spec.supervisor, epoch=spec.epoch,
        generation=spec.generation, digest=spec.digest, state=state, time=time.time(),
        started=started, pid=os.getpid()))


while not stop.is_set():
    beat(WorkerState.RUNNING)
    stop.wait(spec.heartbeat_interval_secs)
beat(WorkerState.STOPPED)
'''


# ---------------------------------------------------------------------- the choice


SETTINGS = SpecSettings(
    spark_master=MASTER, checkpoint_root="/tmp/cp", heartbeat_secs=1.0, stop_grace_secs=3.0
)


def spec_for(
    tmp_path: Path, conf: dict[str, Any], *, python: Path | None = None
) -> tuple[WorkerSpec, PipelineCode]:
    pipeline_code = dataclasses.replace(code(tmp_path), python=python)
    paths = WorkerPaths.of(tmp_path, "etl")
    return build_spec(SETTINGS, "s1", assignment(conf=conf), pipeline_code, paths), pipeline_code


def test_a_pipeline_with_no_spark_conf_or_only_runtime_keys_fits_a_warm_worker(
    tmp_path: Path,
) -> None:
    confs: list[dict[str, Any]] = [
        {},
        {"spark.sql.shuffle.partitions": 4, "spark.sql.session.timeZone": "UTC"},
        {"spark.stratus.example.input": "/in", "spark.myjob.retries": 3},
        {"spark.ui.enabled": False, "spark.master": MASTER, "pipeline.trigger.interval.secs": 2},
    ]
    for conf in confs:
        spec, pipeline_code = spec_for(tmp_path, conf)
        assert cold_reason(spec, pipeline_code, MASTER) is None, conf


def test_a_pipeline_whose_static_conf_differs_starts_cold(tmp_path: Path) -> None:
    cases: dict[str, dict[str, Any]] = {
        "spark.driver.memory": {"spark.driver.memory": "2g"},
        "spark.app.name": {"spark.app.name": "mine"},
        "spark.sql.extensions": {"spark.sql.extensions": "x.Ext"},
        "spark.ui.enabled": {"spark.ui.enabled": True},
        "spark.executor.memory": {"spark.executor.memory": "1g", "spark.myjob.x": 1},
        "spark.jars.packages": {"spark.jars.packages": "org.x:y:1"},
    }
    for key, conf in cases.items():
        spec, pipeline_code = spec_for(tmp_path, conf)
        reason = cold_reason(spec, pipeline_code, MASTER)
        assert reason is not None and key in reason, (conf, reason)
    assert is_runtime_key("spark.sql.shuffle.partitions")
    assert not is_runtime_key("spark.sql.warehouse.dir")
    assert is_runtime_key("spark.stratus.test.input")
    assert not is_runtime_key("spark.serializer")
    assert static_mismatch({"spark.sql.session.timeZone": "UTC"}, MASTER) is None


def test_an_environment_a_master_or_pipeline_env_of_its_own_starts_cold(tmp_path: Path) -> None:
    spec, pipeline_code = spec_for(tmp_path, {}, python=Path("/envs/x/bin/python"))
    assert "requirements" in (cold_reason(spec, pipeline_code, MASTER) or "")
    spec, pipeline_code = spec_for(tmp_path, {"pipeline.env.REGION": "eu"})
    assert "pipeline.env" in (cold_reason(spec, pipeline_code, MASTER) or "")
    spec, pipeline_code = spec_for(tmp_path, {"spark.master": "local[2]"})
    assert "spark.master" in (cold_reason(spec, pipeline_code, MASTER) or "")
    sdp = code(tmp_path, "name: etl\nkind: sdp\n")
    spec = build_spec(SETTINGS, "s1", assignment(), sdp, WorkerPaths.of(tmp_path, "etl"))
    assert "sdp" in (cold_reason(spec, sdp, MASTER) or "")


# ---------------------------------------------------------------------- the pool, stand-ins


@pytest.fixture
def cluster(zk_hosts: str, tmp_path: Path) -> Iterator[Cluster]:
    with kazoo_client(zk_hosts) as zk:
        yield Cluster(zk, zk_hosts, tmp_path)


@contextlib.contextmanager
def warm_supervisor(cluster: Cluster, **extra: Any) -> Iterator[Supervisor]:
    script = cluster.tmp_path / "warm_stand_in.py"
    script.write_text(WARM_STAND_IN)
    conf: StratusConfig = cluster.conf(
        **{
            "supervisor.worker.warm": True,
            "supervisor.worker.warm.memory.mb": WARM_BUDGET_MB,
            "supervisor.slots": 2,
            **extra,
        }
    )
    supervisor = Supervisor(
        SupervisorSettings.from_config(conf),
        worker_command=cluster.worker_command,
        warm_command=[sys.executable, str(script)],
    )
    supervisor.start()
    try:
        yield supervisor
    finally:
        supervisor.stop(workers=True)


def warm_pids(supervisor: Supervisor) -> list[int]:
    assert supervisor.warm is not None
    return list(supervisor.warm.pids)


def wait_for_warm(supervisor: Supervisor, count: int) -> list[int]:
    """Wait for ``count`` warm workers, each alive and ready; their pids."""
    ready = supervisor.local_dir / "warm"
    wait_until(
        lambda: (
            len(warm_pids(supervisor)) == count
            and all(
                not process_gone(pid) and any(ready.glob(f"*/{warm_ready_file(pid)}"))
                for pid in warm_pids(supervisor)
            )
        ),
        20,
        f"{count} warm workers",
    )
    return warm_pids(supervisor)


def wait_for_log(supervisor, text: str) -> None:
    """Wait for ``text`` in the log of the etl pipeline's newest run (a pump thread copies a
    worker's output)."""

    def logged() -> bool:
        log = newest_run_log(supervisor.local_dir, "etl")
        return log.exists() and text in log.read_text()

    wait_until(logged, 10, f"{text!r} in the newest run's log")


def test_an_assigned_pipeline_starts_in_a_warm_worker_and_its_slot_is_warmed_again(
    cluster,
) -> None:
    meta = cluster.code.upload("etl")
    with warm_supervisor(cluster) as supervisor:
        warm = wait_for_warm(supervisor, 2)
        wait_until(
            lambda: getattr(cluster.supervisor_beat(), "warm_ready", 0) == 2,
            10,
            "a supervisor heartbeat that counts its 2 ready warm workers (a drain's target)",
        )
        idle = cluster.supervisor_beat()
        assert idle is not None and idle.running == []  # warm workers are no pipelines
        assert cluster.worker_beat() is None
        cluster.assign(meta, conf={"spark.sql.shuffle.partitions": 2})
        beat = cluster.wait_for_worker(WorkerState.RUNNING)
        assert beat.pid in warm  # the pipeline runs in a process that was warm
        assert beat.pid not in warm_pids(supervisor)  # and it is no longer a warm worker
        assert len(wait_for_warm(supervisor, 1)) == 1  # one slot free: one warm worker
        wait_for_log(supervisor, f"warm stand-in runs etl pid={beat.pid}")  # the pipeline's
        assert supervisor.endpoint is not None  # and stratus logs shows them, as the run's:
        shown = httpx.get(f"http://{supervisor.endpoint.address}/api/v1/logs/etl").text
        assert shown.startswith(START_MARK)  # the supervisor's first line of the run, then
        assert f"warm stand-in runs etl pid={beat.pid}" in shown  # the warm worker's first
        assert "warm stand-in waiting" not in shown  # its lines before the hand-over: its own

        cluster.unassign()
        wait_until(lambda: process_gone(beat.pid), 20, "the pipeline's worker to stop")
        wait_for_warm(supervisor, 2)  # its slot is free again: warmed again


def test_a_pipeline_whose_static_conf_differs_starts_cold_beside_the_warm_workers(
    cluster,
) -> None:
    meta = cluster.code.upload("etl")
    with warm_supervisor(cluster) as supervisor:
        warm = wait_for_warm(supervisor, 2)
        cluster.assign(meta, conf={"spark.driver.memory": "1g", "spark.test.mode": "run"})
        beat = cluster.wait_for_worker(WorkerState.RUNNING)
        assert beat.pid not in warm  # the stand-in cold worker, started for it
        wait_for_log(supervisor, "fake worker etl")
        assert set(wait_for_warm(supervisor, 1)) < set(warm)  # its slot's warm one went


def test_a_pipeline_that_crashed_in_a_warm_worker_restarts_cold(cluster) -> None:
    meta = cluster.code.upload("etl")
    with warm_supervisor(cluster) as supervisor:
        warm = wait_for_warm(supervisor, 2)
        cluster.assign(meta)
        first = cluster.wait_for_worker(WorkerState.RUNNING)
        assert first.pid in warm
        os.kill(first.pid, signal.SIGKILL)
        again = cluster.wait_for_worker(
            WorkerState.RUNNING, where=lambda b: b.pid != first.pid and b.restarts == 1
        )
        assert again.pid not in warm  # the stand-in cold worker: started for the restart
        wait_for_log(supervisor, "fake worker etl")


def test_a_killed_warm_worker_is_replaced(cluster) -> None:
    with warm_supervisor(cluster, **{"supervisor.slots": 1}) as supervisor:
        (first,) = wait_for_warm(supervisor, 1)
        os.kill(first, signal.SIGKILL)
        wait_until(lambda: warm_pids(supervisor) not in ([], [first]), 20, "a new warm worker")
        (second,) = wait_for_warm(supervisor, 1)
        assert second != first


def test_a_stopped_supervisor_leaves_no_warm_worker(cluster) -> None:
    with warm_supervisor(cluster) as supervisor:
        warm = wait_for_warm(supervisor, 2)
    assert all(process_gone(pid) for pid in warm)


def test_a_pipeline_handed_to_a_warm_worker_is_adopted_across_a_restart_and_idle_ones_go(
    cluster,
) -> None:
    meta = cluster.code.upload("etl")
    fence = {"supervisor.fence.timeout.secs": 6.0, "nimbus.supervisor.timeout.secs": 10.0}
    with warm_supervisor(cluster, **fence) as supervisor:
        warm = wait_for_warm(supervisor, 2)
        cluster.assign(meta)
        beat = cluster.wait_for_worker(WorkerState.RUNNING)
        assert beat.pid in warm
        idle = [pid for pid in warm if pid != beat.pid]
        supervisor.stop()  # SIGTERM's stop: the handed-over worker runs on, idle ones go
        assert all(process_gone(pid) for pid in idle)
        assert not process_gone(beat.pid)
    restarted = time.time()
    with warm_supervisor(cluster, **fence):
        after = cluster.wait_for_worker(
            WorkerState.RUNNING, where=lambda b: b.time > restarted and b.pid == beat.pid
        )
        assert after.restarts == 0


def test_with_the_setting_false_no_warm_worker_runs(cluster) -> None:
    meta = cluster.code.upload("etl")
    conf = cluster.conf(**{"supervisor.worker.warm": False})
    supervisor = Supervisor(
        SupervisorSettings.from_config(conf), worker_command=cluster.worker_command
    )
    supervisor.start()
    try:
        cluster.assign(meta)
        cluster.wait_for_worker(WorkerState.RUNNING)
        assert supervisor.warm is None
        assert not (supervisor.local_dir / "warm").exists()
    finally:
        supervisor.stop(workers=True)


# ---------------------------------------------------------------------- on real Spark


@pytest.mark.spark
def test_a_pipeline_runs_in_a_warm_spark_worker_and_a_killed_supervisor_leaves_nothing(
    cluster, tmp_path
) -> None:
    meta = cluster.code.upload("pt", passthrough_package("pt"))
    pipeline_conf = passthrough_conf(tmp_path / "in", tmp_path / "out")
    options = cluster.options(
        **SPARK,
        **{
            "pipeline.checkpoint.root": tmp_path / "checkpoints",
            "supervisor.worker.warm": True,
            "supervisor.worker.warm.memory.mb": WARM_BUDGET_MB,
        },
    )
    supervisor = SupervisorProcess(options, id="s1", slots=1, log_dir=tmp_path)
    try:
        supervisor.start()
        supervisor.wait_ready()
        warm_dir = tmp_path / "supervisor-s1" / "warm"
        wait_until(
            lambda: any(
                "event=warm_worker_ready" in _read(log) for log in warm_dir.glob("*/warm.log")
            ),
            SPARK_SECS,
            "the warm worker's Spark to start",
        )
        (warm,) = [pid for pid in descendants(supervisor.pid or 0) if _is_warm(pid)]

        cluster.assign(meta, "pt", conf=pipeline_conf)
        beat = cluster.wait_for_worker(
            WorkerState.RUNNING, "pt", where=lambda b: bool(b.app_id), timeout=60
        )
        assert beat.pid == warm  # the pipeline runs in the warm worker
        write_ids(tmp_path / "in", range(10))
        wait_until(lambda: read_ids(tmp_path / "out") == list(range(10)), 60, "the rows")

        processes = descendants(supervisor.pid or 0)  # the worker and its Spark JVM
        supervisor.kill()  # SIGKILL: the idle warm worker sees EOF, the pipeline's lease ends
        wait_until(all_gone(processes), 60, "the worker and its JVM to exit")
    finally:
        supervisor.stop(workers=True)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _is_warm(pid: int) -> bool:
    try:
        return b"stratus.worker.warm" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
