"""The leader's pipeline fence (``POST /api/v1/fence/pipelines``) on a real supervisor: a
``Supervisor`` on a real ZooKeeper running two pipelines' stand-in workers (real processes,
real signals; ``tests/cluster/test_supervisor.py``), fenced by the leader's own client
(``SupervisorFencing.fence_pipelines``) and by hand.

What is proved: the fence of one pipeline stops its worker only, the other runs on (the
same process) and the supervisor keeps its lease; the fenced worker does not start again
for the assignment it was fenced under, though the supervisor reads its assignments after
the fence, and starts again once the leader rewrites it (a newer fencing token); an epoch
older than the supervisor has seen, another supervisor's id, a caller without credentials
and one without ``admin`` stop nothing.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from stratus.api.records import SupervisorSummary, WorkerState
from stratus.nimbus.scheduling.supervisor_fencing import SupervisorFencing
from stratus.nimbus.settings import FencingSettings
from stratus.security.client_auth import ClientAuth
from stratus.supervisor.daemon import Supervisor
from tests.cluster.test_supervisor import Cluster, running
from tests.harness.zkfixtures import kazoo_client, process_gone

pytestmark = pytest.mark.slow

READ_TOKEN = "read-secret-0123456789"
ADMIN_TOKEN = "admin-secret-0123456789"
EPOCH = 3
FENCING = FencingSettings(after_secs=5, methods=(), timeout_secs=10, stop_secs=1.0)


@dataclass
class Running:
    """A supervisor running etl's and web's workers, and the leader's fencing client."""

    cluster: Cluster
    supervisor: Supervisor
    summary: SupervisorSummary
    url: str  # the pipeline fence's
    pids: dict[str, int]
    leader: SupervisorFencing

    def fence(self, *pipelines: str, epoch: int = EPOCH) -> bool:
        return self.leader.fence_pipelines(self.summary, pipelines, epoch, timeout=10.0)

    def pid(self, name: str) -> int | None:
        beat = self.cluster.worker_beat(name)
        return beat.pid if beat is not None else None


@pytest.fixture
def two_pipelines(zk_hosts, tmp_path) -> Iterator[Running]:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"read token {READ_TOKEN}\nadmin token {ADMIN_TOKEN}\n")
    tokens.chmod(0o600)
    with kazoo_client(zk_hosts) as zk:
        cluster = Cluster(zk, zk_hosts, tmp_path)
        conf = cluster.conf("s1", **{"nimbus.auth.tokens.file": str(tokens)})
        with running(conf, cluster) as supervisor:
            assert supervisor.endpoint is not None
            summary = cluster.registration("s1")
            assert summary is not None and summary.endpoint is not None
            pids = {}
            for name in ("etl", "web"):
                cluster.assign(cluster.code.upload(name), name=name, epoch=EPOCH)
                beat = cluster.wait_for_worker(WorkerState.RUNNING, name)
                assert beat.pid is not None
                pids[name] = beat.pid
            leader = SupervisorFencing(FENCING, ClientAuth(token=ADMIN_TOKEN))
            try:
                yield Running(
                    cluster,
                    supervisor,
                    summary,
                    f"http://{supervisor.endpoint.address}/api/v1/fence/pipelines",
                    pids,
                    leader,
                )
            finally:
                leader.close()


def test_a_pipeline_fence_stops_one_pipeline_and_the_supervisor_keeps_the_other_and_its_lease(
    two_pipelines,
) -> None:
    s1 = two_pipelines
    assert s1.fence("etl")
    assert process_gone(s1.pids["etl"])  # gone before the answer
    assert not process_gone(s1.pids["web"])
    assert s1.pid("web") == s1.pids["web"]  # the same process runs on
    assert s1.supervisor.lease.fences == 0
    assert s1.supervisor.lease.remaining(time.monotonic()) > 0
    assert set(s1.supervisor.control.workers) == {"web"}

    # Assignments read after the fence (a new pipeline's, which runs) still name s1 for etl
    # with the token it was fenced under: it does not start again.
    probe = s1.cluster.code.upload("probe")
    s1.cluster.assign(probe, name="probe", epoch=EPOCH)
    s1.cluster.wait_for_worker(WorkerState.RUNNING, "probe")
    assert set(s1.supervisor.control.workers) == {"web", "probe"}
    assert s1.pid("web") == s1.pids["web"]

    # The leader rewrites etl's assignment (moved away and back): a newer token runs it.
    s1.cluster.assign(s1.cluster.code.upload("etl"), name="etl", epoch=EPOCH)
    again = s1.cluster.wait_for_worker(
        WorkerState.RUNNING, "etl", where=lambda beat: beat.pid != s1.pids["etl"]
    )
    assert again.pid is not None and not process_gone(again.pid)
    assert s1.pid("web") == s1.pids["web"]


def test_a_stale_epoch_another_supervisor_and_callers_without_admin_stop_nothing(
    two_pipelines,
) -> None:
    s1 = two_pipelines
    order = {"epoch": EPOCH, "supervisor": "s1", "pipelines": ["etl"]}
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    with httpx.Client(timeout=30.0) as http:
        assert http.post(s1.url, json=order).status_code == 401
        reader = {"Authorization": f"Bearer {READ_TOKEN}"}
        forbidden = http.post(s1.url, json=order, headers=reader)
        assert forbidden.status_code == 403 and forbidden.json()["error"] == "forbidden"

        stale = http.post(s1.url, json={**order, "epoch": EPOCH - 1}, headers=admin)
        assert stale.status_code == 409 and stale.json()["error"] == "stale_epoch"
        assert "refuses a pipeline fence of epoch 2: it has seen epoch 3" in stale.json()["message"]
        other = http.post(s1.url, json={**order, "supervisor": "s2"}, headers=admin)
        assert other.status_code == 409 and other.json()["error"] == "wrong_supervisor"
        assert "refuses a pipeline fence meant for supervisor 's2'" in other.json()["message"]

        twice = http.post(s1.url, json={**order, "pipelines": ["etl", "etl"]}, headers=admin)
        assert twice.status_code == 422 and twice.json()["error"] == "invalid_request"
        assert "name each pipeline once (etl more than once)" in twice.json()["message"]
        as_graceful = http.post(
            s1.url.removesuffix("/pipelines"), json=order, headers=admin
        )  # the graceful fence's body has no pipelines: it stops nothing either
        assert as_graceful.status_code == 422

    # The leader's own client, in an older term or without admin, is refused the same way.
    assert not s1.fence("etl", epoch=EPOCH - 1)
    reading = SupervisorFencing(FENCING, ClientAuth(token=READ_TOKEN))
    try:
        assert not reading.fence_pipelines(s1.summary, ["etl"], EPOCH, timeout=10.0)
    finally:
        reading.close()
    assert [s1.pid(name) for name in ("etl", "web")] == [s1.pids["etl"], s1.pids["web"]]
    assert not process_gone(s1.pids["etl"]) and s1.supervisor.lease.fences == 0


def test_a_supervisor_that_never_answers_or_has_no_endpoint_is_not_fenced() -> None:
    leader = SupervisorFencing(FENCING, ClientAuth(token=ADMIN_TOKEN))
    with socket.create_server(("127.0.0.1", 0)) as silent:  # connects, never answers
        hung = SupervisorSummary(
            id="s1", host="127.0.0.1", endpoint=f"127.0.0.1:{silent.getsockname()[1]}"
        )
        try:
            assert not leader.fence_pipelines(hung, ["etl"], EPOCH, timeout=0.5)
            assert not leader.fence_pipelines(hung, ["etl"], EPOCH, timeout=0.0)  # no time left
            assert not leader.fence_pipelines(SupervisorSummary(id="s1"), ["etl"], EPOCH, 5.0)
        finally:
            leader.close()
