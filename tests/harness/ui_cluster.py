"""The cluster the web UI's tests look at: three real nimbus processes, one real supervisor,
and pipelines that never start Spark.

No pipeline is ACTIVE while a supervisor runs (an assignment would start a Spark worker):
``etl`` (a secret in its conf) and ``spare`` are submitted while only a registration of
``s-gone`` exists (no process: the leader assigns them there, which their assignment
histories record), then deactivated, and the registration removed, before the real
supervisor starts; ``etl`` gets a worker heartbeat written as a supervisor that has gone
(``s-gone``) would have left it, with a crash whose error holds the secret, so the pages
have a worker state, restarts, a batch, a rate, a last error and a Spark UI link to show.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kazoo.client import KazooClient

from stratus.api.records import (
    PipelineStatus,
    QueryProgress,
    SupervisorSummary,
    WorkerCrash,
    WorkerHeartbeat,
    WorkerState,
)
from stratus.client import NimbusClient
from stratus.local.processes import SupervisorProcess
from stratus.security.client_auth import NO_AUTH, ClientAuth
from stratus.state.heartbeats import HeartbeatBoard
from stratus.state.zk_store import ZooKeeperStateStore
from stratus.zk.paths import ClusterPaths
from tests.harness.nimbus_cluster import NimbusCluster, nimbus_cluster
from tests.harness.package_factory import valid_package
from tests.harness.secure_cluster import ADMIN, PEER, SUBMIT_PRINCIPAL, token_file
from tests.harness.zkfixtures import wait_until

SECRET = "hunter2-not-for-eyes"
SECRET_KEY = "pipeline.env.DB_PASSWORD"
PIPELINES = ("etl", "spare")
GONE = "s-gone"  # the supervisor id of the hand-written worker heartbeat
SPARK_UI = "http://127.0.0.1:4040"
WAIT_SECS = 30.0
REFRESH_SECS = 1.0  # nimbus.ui.refresh.secs: the pages poll every second


@dataclass
class UiCluster:
    nimbuses: NimbusCluster
    supervisor: SupervisorProcess
    client: NimbusClient


def worker_heartbeat(now: float) -> WorkerHeartbeat:
    """What a worker of ``etl`` on a supervisor that has gone left behind."""
    return WorkerHeartbeat(
        pipeline="etl",
        supervisor=GONE,
        epoch=1,
        generation=0,
        state=WorkerState.RESTARTING,
        time=now,
        started=now - 60,
        pid=4242,
        app_id="local-1",
        spark_ui=SPARK_UI,
        queries=[
            QueryProgress(name="q", batch_id=17, processed_rows_per_second=12.5, rows_total=99)
        ],
        restarts=3,
        error=f"boom: DB_PASSWORD={SECRET}",
        last_crash=WorkerCrash(time=now - 5, exit_code=3, error=f"Traceback: {SECRET} refused"),
    )


@contextlib.contextmanager
def ui_cluster(
    zk_connect: str, log_dir: Path, test_name: str, *, tokens: bool = False
) -> Iterator[UiCluster]:
    """The cluster; with ``tokens`` its nimbuses require the tokens of ``secure_cluster.py``
    (the test's own calls use ADMIN, the daemons' PEER)."""
    extra = ["-c", f"nimbus.ui.refresh.secs={REFRESH_SECS}"]
    auth = NO_AUTH
    if tokens:
        extra += [
            "-c", f"nimbus.auth.tokens.file={token_file(log_dir)}",
            "-c", f"client.auth.token={PEER}",
        ]  # fmt: skip
        auth = ClientAuth(token=ADMIN)
    with nimbus_cluster(zk_connect, log_dir, test_name, extra=extra, auth=auth) as nimbuses:
        nimbuses.wait_for_agreed_leader()
        client = NimbusClient(nimbuses.seeds, retry_deadline=WAIT_SECS, auth=auth)
        try:
            paths = ClusterPaths(nimbuses.root)
            zk = KazooClient(hosts=zk_connect)
            zk.start()
            try:
                registration = SupervisorSummary(id=GONE, slots=len(PIPELINES))
                zk.create(paths.supervisor(GONE), registration.encode(), ephemeral=True)
                # with tokens the page's user (SUBMIT, principal ci) owns them with the admin
                owners = {"pipeline.owners": SUBMIT_PRINCIPAL} if tokens else {}
                for name in PIPELINES:
                    client.submit(name, valid_package(name), {SECRET_KEY: SECRET, **owners})
                wait_until(
                    lambda: all(zk.exists(paths.assignment(name)) for name in PIPELINES),
                    WAIT_SECS,
                    f"{PIPELINES} assigned to the registration {GONE}",
                )
                for name in PIPELINES:
                    client.deactivate(name)
                wait_until(
                    lambda: not any(zk.exists(paths.assignment(name)) for name in PIPELINES),
                    WAIT_SECS,
                    f"{PIPELINES} unassigned",
                )
                zk.delete(paths.supervisor(GONE))
            finally:
                zk.stop()
                zk.close()
            wait_until(
                lambda: all(
                    client.status(name).status is PipelineStatus.INACTIVE for name in PIPELINES
                ),
                WAIT_SECS,
                f"{PIPELINES} INACTIVE",
            )
            zk = KazooClient(hosts=zk_connect)
            zk.start()
            try:
                board = HeartbeatBoard(
                    ZooKeeperStateStore(zk, ClusterPaths(nimbuses.root).heartbeats)
                )
                board.put_worker(worker_heartbeat(time.time()))
            finally:
                zk.stop()
                zk.close()
            supervisor = SupervisorProcess(nimbuses.options, id="s1", slots=2, log_dir=log_dir)
            supervisor.start()
            try:
                supervisor.wait_ready()
                yield UiCluster(nimbuses, supervisor, client)
            finally:
                supervisor.signal(signal.SIGKILL)
                supervisor.kill()
        finally:
            client.close()
