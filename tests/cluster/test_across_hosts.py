"""A cluster across hosts: every daemon on a host of its own network namespace, with its own
address, so that a host cut off from the network is a real partition
(``tests/harness/netns_hosts.py``).

Scenarios: a ZooKeeper quorum whose members listen on three hosts keeps serving when one host
is cut off, and the cut member serves again once healed; a streaming pipeline on the host of
the leader nimbus moves, when that host is cut off, to a supervisor on another host under a
new leader, never runs twice, loses and duplicates no row, and the healed host rejoins as a
standby nimbus and a registered supervisor. That cluster runs with security on, as on a real
network: nimbuses serve https with a certificate naming their host's address and require a
client certificate and a token or a certificate mapped to a role (the supervisors and
nimbuses of two hosts fetch code with their host's certificate, mapped to the read role: no
token; those of the third with a read token, their certificate mapped to nothing; a nimbus
of each kind fetches the pipeline's code from another host), the quorum members serve
other hosts on their TLS ports alone and talk to each other over TLS, every daemon connects
to them with TLS and its host's certificate and authenticates with digest, the quorum members
refuse anonymous clients, and every znode is stratus's alone. Its workers are walled off:
each host's supervisor runs them as users of its own (``supervisor.worker.run.as: pool``),
so the moved pipeline resumes as another user from the checkpoints the first one wrote.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml
from kazoo.exceptions import SessionClosedRequireSaslError
from kazoo.handlers.threading import KazooTimeoutError

from stratus.api.records import WorkerHeartbeat
from stratus.client import NimbusClient
from stratus.codedist.package_build import build_package
from stratus.local.demo import EXAMPLES
from stratus.local.examples_io import FLUSH_KEY, Feeder, read_rows, window_count_total
from stratus.supervisor.worker_access import process_uids
from stratus.zk.auth import ServerAuth, ZkCredentials
from stratus.zk.server import ZooKeeperServer
from stratus.zk.tls import ServerTls
from tests.harness.hosts_cluster import HostsCluster, start_quorum, zookeeper_quorum
from tests.harness.netns_hosts import TAG, NetnsHosts, remove_leftovers, unavailable
from tests.harness.pipeline_cluster import SPARK_START_SECS, cluster_options
from tests.harness.secure_cluster import ADMIN, PEER, TOKENS
from tests.harness.tls_certs import Issued, TestCa
from tests.harness.worker_users import (
    WalledHosts,
    keep_files,
    needs_root,
    share_with_group,
    traversable_dir,
    walled_hosts,
)
from tests.harness.zk_acl import (
    acl_of,
    digest_client,
    every_znode,
    sasl_client,
    sasl_identity,
    secret_file,
)
from tests.harness.zkfixtures import kazoo_client, process_gone, wait_until

HOSTS = ("h1", "h2", "h3")
TOKEN_HOST = "h3"  # its daemons present a read token; the others' their certificate alone
STREAMING = "streaming-counts"
OUTPUT_SECS = 180.0
FOUR_LETTER = (
    "import socket, sys\n"
    "with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5) as s:\n"
    "    s.sendall(b'srvr'); s.shutdown(socket.SHUT_WR)\n"
    "    print(b''.join(iter(lambda: s.recv(65536), b'')).decode())\n"
)
STRATUS = ZkCredentials("stratus", "zk-digest-password-across-hosts")
ROOT = "/stratus"  # zookeeper.root's default
RECORD_KEY = "spark.stratus.test.batches"
GATEWAY_KEY = "spark.stratus.test.gateway"
BATCH_RECORD = f'''"""The streaming example; it records each micro-batch: id, host, user, time."""

import json
import os
import socket
import time

from pyspark.sql.streaming import StreamingQueryListener

from streaming_counts import job


class BatchRecord(StreamingQueryListener):
    def __init__(self, path, host):
        self.path, self.host = path, host

    def onQueryStarted(self, event):
        pass

    def onQueryProgress(self, event):
        progress = event.progress
        line = json.dumps(
            {{
                "batch": progress.batchId,
                "host": self.host,
                "uid": os.getuid(),
                "time": time.time(),
            }}
        )
        with open(self.path, "a") as record:  # O_APPEND: whole lines from every worker
            record.write(line + "\\n")

    def onQueryIdle(self, event):
        pass

    def onQueryTerminated(self, event):
        pass


def own_address(gateway):
    """This host's address: the source address of a route to the gateway."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((gateway, 9))
        return probe.getsockname()[0]


def run(spark, context):
    host = own_address(context.conf["{GATEWAY_KEY}"])
    spark.streams.addListener(BatchRecord(context.conf["{RECORD_KEY}"], host))
    job.run(spark, context)
'''


@pytest.fixture
def hosts() -> Iterator[NetnsHosts]:
    reason = unavailable()
    if reason is not None:
        pytest.skip(f"no hosts of network namespaces here: {reason}")
    with NetnsHosts(HOSTS) as made:
        yield made


def security(hosts: NetnsHosts, directory: Path) -> dict[str, Any]:
    """``HostsCluster``'s keyword arguments for TLS, tokens and ZooKeeper ACLs, with the CA,
    certificates, token files and ZooKeeper credentials they name, made in ``directory``.

    Each host's certificate names its address: its nimbus and its supervisor's endpoint
    (with the nimbuses' token file) serve https with it, its quorum member serves TLS with
    it (to other hosts on the secure port alone, and to the other members), and its daemons
    show it as their client certificate, to ZooKeeper and to the nimbuses, whose token file
    maps its name to the read role (mutual TLS: the daemons hold no token), except
    ``TOKEN_HOST``'s, whose name the token file does not know: its daemons present a read
    token. Every daemon trusts the CA; the nimbuses demand a client
    certificate of everyone; the test's clients hold a certificate and an admin token; every
    daemon authenticates to ZooKeeper with SASL DIGEST-MD5, and the quorum members admit its
    user alone.
    """
    directory.mkdir()
    ca = TestCa(directory)
    zk_secret = secret_file(directory / "zk.secret", f"{STRATUS.user}:{STRATUS.password}")
    ca_file = str(ca.cert)
    certificates = {host.name: ca.issue(f"host-{host.name}", ip=host.address) for host in hosts}
    test_client = ca.issue("test-client")  # a name the token file does not know
    roles = "".join(
        f"read   cn    {issued.cert.stem}\n"
        for name, issued in certificates.items()
        if name != TOKEN_HOST
    )
    tokens = secret_file(directory / "tokens", TOKENS + roles)
    by_token = {"client.auth.token.file": str(secret_file(directory / "read.token", PEER))}
    return {
        "settings": {
            "zookeeper.auth.scheme": "sasl",
            "zookeeper.auth.sasl.mechanism": "DIGEST-MD5",
            "zookeeper.auth.file": str(zk_secret),
            "zookeeper.ssl.enabled": True,
            "zookeeper.ssl.ca.file": ca_file,
            "client.tls.ca": ca_file,
        },
        "nimbus_settings": {
            "nimbus.auth.tokens.file": str(tokens),
            "nimbus.tls.ca": ca_file,
            "nimbus.tls.client.cert.required": True,
        },
        # the supervisors' endpoints: on their host's address, over https, with the token
        # file (an open endpoint would be loopback alone, which a supervisor of a cluster
        # across hosts refuses to register)
        "supervisor_settings": {"nimbus.auth.tokens.file": str(tokens)},
        "host_settings": {
            name: {
                "nimbus.tls.cert": str(issued.cert),
                "nimbus.tls.key": str(issued.key),
                "zookeeper.ssl.cert.file": str(issued.cert),
                "zookeeper.ssl.key.file": str(issued.key),
                "client.tls.cert": str(issued.cert),
                "client.tls.key": str(issued.key),
                **(by_token if name == TOKEN_HOST else {}),
            }
            for name, issued in certificates.items()
        },
        "client_settings": {
            "client.tls.ca": ca_file,
            "client.auth.token.file": str(secret_file(directory / "admin.token", ADMIN)),
            "client.tls.cert": str(test_client.cert),
            "client.tls.key": str(test_client.key),
            "zookeeper.ssl.cert.file": str(test_client.cert),
            "zookeeper.ssl.key.file": str(test_client.key),
        },
        "zookeeper_auth": ServerAuth(required=True, users=(STRATUS,)),
        "zookeeper_tls": {
            name: ServerTls(
                port=0,
                keystore=keystore(issued, directory / f"zookeeper-{name}.pem"),
                truststore=ca.cert,
                quorum=True,
            )
            for name, issued in certificates.items()
        },
    }


def keystore(issued: Issued, path: Path) -> Path:
    """A ZooKeeper PEM keystore of ``issued``: its private key, then its certificate."""
    return secret_file(path, issued.key.read_text().strip() + "\n" + issued.cert.read_text())


def assert_zookeeper_speaks_tls_alone(zk_connect: str, tls: dict[str, Any]) -> None:
    """The quorum's ports that other hosts reach answer TLS clients, and no plain one, even
    with stratus's credentials."""
    with sasl_client(zk_connect, STRATUS, **tls) as client:
        assert client.exists(ROOT)
    with pytest.raises(KazooTimeoutError), sasl_client(zk_connect, STRATUS, connect_timeout=3):
        pass


def assert_znodes_are_stratus_alone(zk_connect: str, tls: dict[str, Any]) -> None:
    """Every znode under the root has stratus's SASL identity as its whole ACL; the quorum
    refuses an anonymous client and one with made-up digest credentials (digest admits any
    pair, so the quorum admits SASL alone)."""
    with sasl_client(zk_connect, STRATUS, **tls) as owner:
        paths = list(every_znode(owner, ROOT))
        assert any(path.startswith(f"{ROOT}/assignments/") for path in paths)
        assert {path: acl_of(owner, path) for path in paths} == dict.fromkeys(
            paths, sasl_identity(STRATUS)
        )
    with (
        kazoo_client(zk_connect, **tls) as anonymous,
        pytest.raises(SessionClosedRequireSaslError),
    ):
        anonymous.create(f"{ROOT}/intruder", b"x")
    with (
        digest_client(zk_connect, ZkCredentials("intruder", "x"), **tls) as other,
        pytest.raises(SessionClosedRequireSaslError),
    ):
        other.get_children("/")


def srvr_from(hosts: NetnsHosts, name: str, address: str, port: int) -> str:
    """ZooKeeper's ``srvr`` answer at ``address:port``, asked from host ``name``."""
    process = hosts.popen(
        name,
        [sys.executable, "-c", FOUR_LETTER, address, str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    output, _ = process.communicate(timeout=30)
    return output.decode(errors="replace")


def test_a_zookeeper_quorum_spans_hosts_and_a_cut_off_member_serves_again_once_healed(
    hosts, tmp_path
):
    members = zookeeper_quorum(hosts, tmp_path)
    try:
        start_quorum(list(members.values()))
        for name, member in members.items():  # each listens on its host's address alone
            assert member.connect_string == f"{hosts[name].address}:{member.port}"
            assert "Mode:" in srvr_from(hosts, "h2", hosts[name].address, member.port)
            assert "Mode:" not in srvr_from(hosts, name, "127.0.0.1", member.port)
        connect = ",".join(member.connect_string for member in members.values())
        cut = next(name for name, member in members.items() if member.mode() == "leader")
        rest = [name for name in HOSTS if name != cut]

        hosts.cut(cut)
        wait_until(
            lambda: "not currently serving" in srvr_from(hosts, cut, *_address(members, cut)),
            60,
            f"the member on cut-off host {cut} to stop serving",
        )
        wait_until(
            lambda: {members[name].mode() for name in rest} == {"leader", "follower"},
            60,
            f"the members on {rest} to form a quorum without {cut}",
        )
        survivors = ",".join(members[name].connect_string for name in rest)
        with kazoo_client(survivors) as client:
            client.create("/written-while-cut", b"yes")

        hosts.heal(cut)
        members[cut].wait_serving(60)
        with kazoo_client(members[cut].connect_string) as client:
            client.sync("/")
            assert client.get("/written-while-cut")[0] == b"yes"
        with kazoo_client(connect) as client:
            assert client.exists("/written-while-cut")
    finally:
        for member in members.values():
            member.kill()


def test_a_host_lists_the_processes_running_on_it_and_no_others(hosts):
    sleeper = hosts.popen("h1", ["sleep", "600"])
    try:
        # ip netns exec execs the command itself, once it has entered the namespace
        wait_until(lambda: sleeper.pid in hosts.pids("h1"), 10, "the sleeper on h1")
        assert sleeper.pid not in hosts.pids("h2")
    finally:
        sleeper.kill()
        sleeper.wait()
    assert sleeper.pid not in hosts.pids("h1")


def test_what_a_dead_run_left_is_removed_and_a_live_run_keeps_its_hosts(hosts):
    dead = subprocess.Popen(["true"])
    dead.wait()
    live = subprocess.Popen(["sleep", "600"])
    dead_run, live_run = f"{TAG}{dead.pid:x}_0", f"{TAG}{live.pid:x}_0"
    try:
        for run in (dead_run, live_run):
            subprocess.run(["ip", "netns", "add", f"{run}_h1"], check=True)
            subprocess.run(["ip", "link", "add", f"{run}b", "type", "bridge"], check=True)

        removed = remove_leftovers()

        assert sorted(removed) == sorted([f"{dead_run}_h1", f"{dead_run}b"])
        namespaces = _ip_names("netns", "list")
        assert f"{dead_run}_h1" not in namespaces
        assert {f"{live_run}_h1", hosts["h1"].namespace} <= namespaces  # live runs keep theirs
        assert f"{dead_run}b" not in _ip_names("-o", "link", "show")
    finally:
        live.kill()
        live.wait()
        remove_leftovers()


def _ip_names(*arguments: str) -> set[str]:
    """The names ``ip ARGUMENTS`` lists (namespaces, or links without their ``@peer``)."""
    lines = subprocess.run(["ip", *arguments], capture_output=True, text=True, check=True).stdout
    names = set()
    for line in lines.splitlines():
        field = line.split(":")[1] if arguments[0] == "-o" else line.split()[0]
        names.add(field.strip().split("@")[0])
    return names


def _address(members: dict[str, ZooKeeperServer], name: str) -> tuple[str, int]:
    return members[name].host, members[name].port


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.timeout(900)
@needs_root
def test_a_pipeline_on_the_cut_off_leader_host_moves_to_another_host_and_never_runs_twice(
    hosts, tmp_path
):
    with traversable_dir() as base, walled_hosts(HOSTS, base) as walls:
        try:
            run_the_pipeline_across_hosts(hosts, tmp_path, base, walls)
        finally:
            keep_files(base, tmp_path / "logs")


def run_the_pipeline_across_hosts(
    hosts: NetnsHosts, tmp_path: Path, base: Path, walls: WalledHosts
) -> None:
    """The scenario, its workers walled off: each host's supervisor runs them as users of its
    own, the shared directory open to those users' group (the checkpoint root: to the
    supervisors, which hand each pipeline's directory to its worker's user)."""
    shared = base / "shared"  # one file system: every host reaches it
    (shared / "checkpoints").mkdir(parents=True)
    share_with_group(shared, walls.group)
    secured = security(hosts, tmp_path / "security")
    settings: dict[str, object] = dict(_pairs(cluster_options(shared / "checkpoints")))
    settings["pipeline.min.replication.count"] = 2
    secured["settings"] = {**settings, **secured["settings"]}
    with HostsCluster(
        hosts, base, **secured, worker_users=walls.users, python=walls.python
    ) as cluster:
        home = leader_not_on(cluster, TOKEN_HOST)  # the pipeline runs on the leader's host
        cluster.add_supervisor(home)
        client = cluster.client()
        feeder = Feeder(shared / "input")
        submit_recorded(client, hosts, shared, tmp_path / "package")
        for name in (name for name in HOSTS if name != home):  # by token, by certificate
            wait_until(
                partial(fetched_from_another_host, cluster, hosts, name),
                60,
                f"the nimbus on {name} to fetch {STREAMING}'s code from another host",
            )
        first = _wait_running(client, STREAMING, on=home)
        assert_runs_as(first, walls.uids(home))
        feeder.start()
        try:
            wait_until(
                lambda: window_count_total(shared / "output") > 0,
                OUTPUT_SECS,
                "the first windows counted on the leader's host",
            )
            others = [name for name in HOSTS if name != home]
            for name in others:
                cluster.add_supervisor(name)
            old_pid = first.pid or 0
            assert cluster.wait_for_agreed_leader() == home  # leader and pipeline: one host

            hosts.cut(home)
            wait_until(lambda: process_gone(old_pid), 60, f"the worker on cut-off {home} to stop")
            old_gone_by = time.time()
            survivors = cluster.client(without=[home])
            leader = cluster.wait_for_agreed_leader(among=others, not_on=home)
            moved = _wait_running(survivors, STREAMING, not_on=home)

            assert leader in others
            assert moved.supervisor in others
            assert moved.started > old_gone_by  # the two workers never ran at once
            counted = window_count_total(shared / "output")
            wait_until(
                lambda: window_count_total(shared / "output") > counted,
                OUTPUT_SECS,
                f"the pipeline to count more windows on {moved.supervisor}",
            )

            hosts.heal(home)
            wait_until(
                lambda: _whole(cluster, home, leader),
                120,
                f"healed host {home}: its nimbus a standby, its supervisor registered",
            )
            assignment = survivors.workers(STREAMING).assignment
            assert assignment is not None and assignment.supervisor == moved.supervisor
        finally:
            fed = feeder.stop()  # writes the flush event: every window closes
        wait_until(
            lambda: window_count_total(shared / "output") >= fed,
            OUTPUT_SECS,
            f"all {fed} events counted",
        )
        survivors.close()
        client.close()
        assert_exactly_once(shared, fed)
        assert_ran_as(walls, shared, old=home, new=moved.supervisor, addresses=hosts)
        assert_zookeeper_speaks_tls_alone(cluster.zk_connect, cluster.zookeeper_tls())
        assert_znodes_are_stratus_alone(cluster.zk_connect, cluster.zookeeper_tls())


def assert_runs_as(worker: WorkerHeartbeat, uids: set[int]) -> None:
    """The worker's process runs as one of ``uids`` (a user of its supervisor's pool)."""
    assert worker.pid is not None
    runs_as = process_uids(worker.pid)
    assert runs_as is not None and set(runs_as) <= uids, f"{worker.pid} runs as {runs_as}"


def assert_ran_as(
    walls: WalledHosts, shared: Path, *, old: str, new: str, addresses: NetnsHosts
) -> None:
    """The batches ran on host ``old``, then ``new``, each as a user of its supervisor's
    pool, and the new host's user was handed the pipeline's checkpoints."""
    assert_ran_on(
        shared,
        old=(addresses[old].address, walls.uids(old)),
        new=(addresses[new].address, walls.uids(new)),
    )
    assert (shared / "checkpoints" / STREAMING).stat().st_uid in walls.uids(new)


def leader_not_on(cluster: HostsCluster, name: str) -> str:
    """The leader's host once every nimbus agrees, not ``name``: a nimbus of ``name`` that
    leads is restarted (its stop gives the lead up at once), so that it fetches the code that
    the leader receives from another host."""
    leader = cluster.wait_for_agreed_leader()
    if leader != name:
        return leader
    restarted = cluster.nimbuses[name]
    restarted.stop()
    leader = cluster.wait_for_agreed_leader(among=[host for host in HOSTS if host != name])
    restarted.start()
    restarted.wait_ready(60.0)
    assert cluster.wait_for_agreed_leader() == leader
    return leader


def fetched_from_another_host(cluster: HostsCluster, hosts: NetnsHosts, name: str) -> bool:
    """Whether host ``name``'s nimbus logged fetching the pipeline's code from another host's."""
    own = hosts[name].address
    for line in cluster.nimbuses[name].log_path.read_text(errors="replace").splitlines():
        if "event=code_fetched" in line and f"pipeline={STREAMING}" in line:
            nodes = re.search(r"nodes=(\S+)", line)
            if nodes and any(not node.startswith(f"{own}:") for node in nodes[1].split(",")):
                return True
    return False


def submit_recorded(client: NimbusClient, hosts: NetnsHosts, shared: Path, package: Path) -> None:
    """Submit the streaming example, recording its batches, input and output in ``shared``."""
    (shared / "input").mkdir(parents=True)
    conf = {
        "spark.stratus.example.input": str(shared / "input"),
        "spark.stratus.example.output": str(shared / "output"),
        "pipeline.min.replication.count": 2,
        RECORD_KEY: str(shared / "batches.jsonl"),
        GATEWAY_KEY: hosts.gateway,
    }
    client.submit(STREAMING, recording_package(package), conf)


def assert_exactly_once(shared: Path, fed: int) -> None:
    """Every event fed is counted once: no window twice, the counts sum to the events."""
    rows = [row for row in read_rows(shared / "output") if row["key"] != FLUSH_KEY]
    windows = [(row["window"]["start"], row["key"]) for row in rows]
    assert len(windows) == len(set(windows))  # no window written twice
    assert sum(row["count"] for row in rows) == fed  # rows out = rows in


def assert_ran_on(shared: Path, *, old: tuple[str, set[int]], new: tuple[str, set[int]]) -> None:
    """The pipeline's own record: batches on host ``old``, then on ``new``, never both; each
    host's as one of the users (uids) its supervisor runs workers as."""
    batches = [json.loads(line) for line in (shared / "batches.jsonl").read_text().splitlines()]
    before = [batch for batch in batches if batch["host"] == old[0] and batch["uid"] in old[1]]
    after = [batch for batch in batches if batch["host"] == new[0] and batch["uid"] in new[1]]
    assert before and after and len(before) + len(after) == len(batches)  # nowhere else
    assert max(b["time"] for b in before) < min(b["time"] for b in after)  # never at once
    assert min(b["batch"] for b in after) >= max(b["batch"] for b in before)  # resumed


def recording_package(directory: Path) -> bytes:
    """The streaming example, entered through ``BATCH_RECORD``, zipped as a package."""
    shutil.copytree(EXAMPLES / "streaming", directory)
    manifest_path = directory / "stratus.yaml"
    manifest: dict[str, Any] = yaml.safe_load(manifest_path.read_text())
    manifest["entrypoint"] = "batch_record:run"
    manifest_path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    (directory / "batch_record.py").write_text(BATCH_RECORD)
    return build_package(directory, directory.with_suffix(".zip")).read_bytes()


def _whole(cluster: HostsCluster, home: str, leader: str) -> bool:
    """Every nimbus names ``leader``; ``home``'s sees itself a standby and its supervisor."""
    if cluster.leader_seen_by(home) != cluster.leader_seen_by(leader):
        return False
    summary = cluster.summary(home)
    if summary is None or summary.leader.address != cluster.nimbuses[leader].address:
        return False
    mine = [n for n in summary.nimbuses if f"{n.host}:{n.port}" == cluster.nimbuses[home].address]
    registered = {supervisor.id for supervisor in summary.supervisors}
    return len(mine) == 1 and not mine[0].is_leader and registered == set(HOSTS)


def _wait_running(
    client: NimbusClient, name: str, *, on: str | None = None, not_on: str | None = None
) -> WorkerHeartbeat:
    """The RUNNING heartbeat of the current assignment's worker, on ``on`` / not ``not_on``."""
    found: list[WorkerHeartbeat] = []

    def running() -> bool:
        workers = client.workers(name)
        beat, assignment = workers.on_assigned(), workers.assignment
        if beat is None or assignment is None or beat.generation != assignment.generation:
            return False
        if beat.state.value != "RUNNING" or not beat.app_id:
            return False
        if (on is not None and beat.supervisor != on) or beat.supervisor == not_on:
            return False
        found[:] = [beat]
        return True

    wait_until(running, SPARK_START_SECS + 60, f"{name} to run (on {on}, not on {not_on})")
    return found[0]


def _pairs(arguments: list[str]) -> Iterator[tuple[str, str]]:
    """``("-c", "k=v", ...)`` as ``(k, v)`` pairs."""
    for argument in arguments[1::2]:
        key, _, value = argument.partition("=")
        yield key, value
