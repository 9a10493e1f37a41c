"""Nothing trusted from a supervisor's registration: real nimbus, supervisor and CLI
processes, some on hosts of their own (``tests/harness/netns_hosts.py``).

A registration (``<root>/supervisors/<id>``) can be rewritten by whoever holds stratus's
ZooKeeper identity. What is proved: a nimbus configured for TLS sends nothing to a plain
listener that a rewritten registration names (``stratus logs`` with an admin token fails,
saying why, and the listener sees no connection); a supervisor on a host of its own
refuses to start when its endpoint would be registered on loopback, and registers its
host's address once it may serve it; the leader aims neither its graceful stop nor the
``process`` method at a loopback endpoint that a supervisor of another host registered
(the supervisor of its own host that listens there keeps running); and a supervisor
refuses a fence meant for another one.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from kazoo.client import KazooClient

from stratus.api.records import SupervisorSummary, WorkerState
from stratus.client import NimbusClient
from stratus.ha.fencing import MethodSpec
from stratus.local.processes import SupervisorProcess
from stratus.nimbus.scheduling.supervisor_fencing import FenceState, SupervisorFencing
from stratus.nimbus.settings import FencingSettings
from stratus.security.client_auth import ClientAuth
from stratus.security.tls import TlsSettings
from stratus.zk.server import ZooKeeperServer
from tests.cluster.test_supervisor import Cluster
from tests.cluster.test_worker_logs import LOG_WORKER, Tokens, running, user_env
from tests.harness.netns_hosts import NetnsHosts, unavailable
from tests.harness.nimbus_cluster import nimbus_cluster
from tests.harness.package_factory import valid_package
from tests.harness.tls_certs import TestCa
from tests.harness.zkfixtures import kazoo_client, wait_until

ROOT = "/stratus"
FENCED = "stratus_supervisor_fenced_total"  # times it stopped its workers: a fence obeyed
ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 6\r\n\r\nstolen"


class PlainListener:
    """A plain HTTP listener on loopback that records every connection and byte it gets,
    and answers any request."""

    def __init__(self) -> None:
        self._server = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._server.getsockname()[1]}"
        self.connections = 0
        self.received = b""
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            self.connections += 1
            with conn:
                conn.settimeout(2.0)
                try:
                    while b"\r\n\r\n" not in self.received and (chunk := conn.recv(65536)):
                        self.received += chunk
                    conn.sendall(ANSWER)  # what a stranger's listener would say
                except OSError:
                    pass

    def close(self) -> None:
        self._server.close()


def rewrite(zk: KazooClient, path: str, **changes: Any) -> SupervisorSummary:
    """What a holder of stratus's ZooKeeper identity does: the registration, changed."""
    summary = SupervisorSummary.model_validate_json(zk.get(path)[0])
    forged = summary.model_copy(update=changes)
    zk.set(path, forged.encode())
    return forged


@pytest.fixture
def log_worker(tmp_path: Path) -> list[str]:
    """A stand-in worker that writes a log (``tests/cluster/test_worker_logs.py``)."""
    script = tmp_path / "log_worker.py"
    script.write_text(LOG_WORKER)
    return [sys.executable, str(script)]


@pytest.mark.spark  # starts a pipeline's worker (a stand-in: no JVM)
def test_a_nimbus_that_speaks_tls_sends_nothing_to_a_plain_listener_a_rewritten_registration_names(
    zk_server, tmp_path, request, log_worker
) -> None:
    tokens = Tokens.make(tmp_path)
    ca = TestCa(tmp_path / "ca")
    node = ca.issue("node", ip="127.0.0.1")
    tls = {
        "nimbus.tls.cert": str(node.cert),
        "nimbus.tls.key": str(node.key),
        "client.tls.ca": str(ca.cert),
        **tokens.options(),
    }
    admin = ClientAuth(token=tokens.admin, tls=TlsSettings(ca=str(ca.cert)))
    extra = [part for key, value in tls.items() for part in ("-c", f"{key}={value}")]
    listener = PlainListener()
    with (
        nimbus_cluster(
            zk_server.connect_string, tmp_path, request.node.name, 1, extra, auth=admin
        ) as nimbuses,
        kazoo_client(zk_server.connect_string) as zk,
        NimbusClient(nimbuses.seeds, retry_deadline=30.0, auth=admin) as client,
    ):
        cluster = Cluster(zk, zk_server.connect_string, tmp_path, root=nimbuses.root)
        conf = cluster.conf(
            **{"nimbus.code.distributor": "local", "supervisor.host": "127.0.0.1", **tls}
        )
        with running(conf, log_worker) as supervisor:
            assert supervisor.endpoint is not None and supervisor.endpoint.tls
            client.wait_replicated(client.submit("etl", valid_package("etl"), {}).name)
            cluster.wait_for_worker(WorkerState.RUNNING)
            seeds = ",".join(nimbuses.seeds)

            def logs() -> subprocess.CompletedProcess[str]:
                return subprocess.run(
                    [sys.executable, "-m", "stratus", "logs", "etl", "-c", f"nimbus.seeds={seeds}",
                     "-c", f"client.tls.ca={ca.cert}"],
                    capture_output=True, text=True, timeout=120, check=False,
                    env=user_env(tokens.admin),
                )  # fmt: skip

            assert logs().returncode == 0  # over https, as the registration says too

            forged = rewrite(
                zk, f"{nimbuses.root}/supervisors/s1", endpoint=listener.address, endpoint_tls=False
            )
            wait_until(
                lambda: forged in client.cluster().supervisors, 20, "the nimbus to see the rewrite"
            )
            refused = logs()
            listener.close()
        assert refused.returncode == 1, refused.stderr
        assert "s1's registration says its endpoint" in refused.stderr
        assert "serves plain http, but this nimbus's configuration says the cluster speaks TLS" in (
            refused.stderr
        )
        assert "nothing was sent to it" in refused.stderr
        assert listener.connections == 0 and listener.received == b""
        assert tokens.admin.encode() not in listener.received
        nimbus_log = "".join(n.log_path.read_text() for n in nimbuses.nimbuses)
        assert "event=supervisor_endpoint_refused supervisor=s1" in nimbus_log


# ---------------------------------------------------------------------- across hosts


@pytest.fixture
def hosts() -> Iterator[NetnsHosts]:
    reason = unavailable()
    if reason is not None:
        pytest.skip(f"no hosts of network namespaces here: {reason}")
    with NetnsHosts(["h2"]) as made:
        yield made


@pytest.fixture
def gateway_zk(hosts: NetnsHosts, tmp_path: Path) -> Iterator[ZooKeeperServer]:
    """A ZooKeeper server of this machine, on the bridge's address: every host reaches it."""
    server = ZooKeeperServer(tmp_path / "zk", host=hosts.gateway, force_sync=False)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def supervisor_options(zk: ZooKeeperServer, **settings: object) -> list[str]:
    values = {
        "zookeeper.servers": zk.connect_string,
        "zookeeper.root": ROOT,
        "zookeeper.session.timeout.secs": 4.0,
        **settings,
    }
    return [part for key, value in values.items() for part in ("-c", f"{key}={value}")]


def test_across_hosts_a_supervisor_registers_a_reachable_endpoint_and_the_leader_never_fences_through_a_loopback_one_of_another_host(  # noqa: E501
    hosts, gateway_zk, tmp_path, caplog
) -> None:
    h2 = hosts["h2"]
    tokens = Tokens.make(tmp_path)
    told = tmp_path / "told"
    started: list[SupervisorProcess] = []

    def supervisor(sid: str, prefix: list[str], **settings: object) -> SupervisorProcess:
        process = SupervisorProcess(
            supervisor_options(gateway_zk, **settings),
            id=sid,
            slots=1,
            log_dir=tmp_path,
            command_prefix=prefix,
        )
        started.append(process)
        process.start()
        return process

    try:
        with kazoo_client(gateway_zk.connect_string) as zk:
            # On h2, without a token file its endpoint may listen on loopback alone: refused
            open_one = supervisor("s2", h2.command, **{"supervisor.host": h2.address})
            assert open_one.wait(60) == 2  # a usage error: the configuration is to fix
            assert "refuses to register its endpoint on the loopback address 127.0.0.1" in (
                open_one.log_tail(5)
            )
            assert "set nimbus.auth.tokens.file" in open_one.log_tail(5)
            assert not zk.exists(f"{ROOT}/supervisors/s2")

            # With the token file it serves the endpoint on h2's address, which this host
            # (the bridge's address) reaches
            s2 = supervisor("s2", h2.command, **{"supervisor.host": h2.address, **tokens.options()})
            s2.wait_ready(60)
            path = f"{ROOT}/supervisors/s2"
            registered = SupervisorSummary.model_validate_json(zk.get(path)[0])
            assert registered.host == h2.address
            assert registered.endpoint is not None
            assert registered.endpoint.startswith(f"{h2.address}:")
            health = httpx.get(f"http://{registered.endpoint}/healthz", timeout=10)
            assert health.status_code == 200

            # The leader's host (this one) runs s1, whose endpoint listens on every interface,
            # loopback included. s2's registration, rewritten to a loopback endpoint on s1's
            # port, must not lead the leader's fence of s2 to s1.
            s1 = supervisor(
                "s1",
                [],
                **{
                    "supervisor.host": hosts.gateway,
                    "supervisor.http.bind.host": "0.0.0.0",
                    **tokens.options(),
                },
            )
            s1.wait_ready(60)
            s1_endpoint = SupervisorSummary.model_validate_json(
                zk.get(f"{ROOT}/supervisors/s1")[0]
            ).endpoint
            assert s1_endpoint is not None
            s1_port = s1_endpoint.rsplit(":", 1)[1]
            forged = rewrite(zk, path, endpoint=f"127.0.0.1:{s1_port}")

            fenced_by_shell = fence(
                forged,
                tokens,
                MethodSpec("process"),
                MethodSpec("shell", f'echo "$STRATUS_FENCE_TARGET_ID" > {told}'),
            )
            assert fenced_by_shell is FenceState.FENCED
            assert told.read_text() == "s2\n"  # the shell method, told of s2 alone
            assert "method=graceful result=refused" in caplog.text
            assert "reason=loopback_of_another_host action=nothing_sent" in caplog.text
            assert "event=process_fence_kill" not in caplog.text
            assert s1.is_running()  # the process method was not aimed at s1's port
            assert "event=fence_refused" not in s1.log_path.read_text()  # nothing reached it

            # Aimed at s1's endpoint by a network address, the fence for s2 reaches s1,
            # which refuses it: nothing stopped
            forged = rewrite(zk, path, endpoint=f"{hosts.gateway}:{s1_port}")
            assert fence(forged, tokens) is FenceState.FAILED
            assert "status=409" in caplog.text and "wrong_supervisor" in caplog.text
            wait_until(
                lambda: "event=fence_refused supervisor=s1 asked_for=s2" in s1.log_path.read_text(),
                10,
                "s1 to log the refusal",
            )
            assert s1.is_running()
            metrics = httpx.get(
                f"http://{s1_endpoint}/metrics",
                headers={"Authorization": f"Bearer {tokens.read}"},
                timeout=10,
            )
            fenced = [line for line in metrics.text.splitlines() if line.startswith(FENCED)]
            assert fenced and all(line.endswith(" 0.0") for line in fenced), fenced
    finally:
        for process in started:
            process.kill()  # SIGKILL and reap: its workers stop at their lease's end


def fence(supervisor: SupervisorSummary, tokens: Tokens, *methods: MethodSpec) -> FenceState:
    """The leader's fence of ``supervisor`` from this host, with an admin token; its outcome."""
    settings = FencingSettings(after_secs=2, methods=methods, timeout_secs=5, stop_secs=1)
    fencing = SupervisorFencing(settings, ClientAuth(token=tokens.admin))
    try:
        assert fencing.start(supervisor, epoch=1, silent_since=0.0)

        def done() -> bool:
            return fencing.attempts()[supervisor.id].state is not FenceState.FENCING

        wait_until(done, 30, f"the fence of {supervisor.id} to end")
        return fencing.attempts()[supervisor.id].state
    finally:
        fencing.close()
