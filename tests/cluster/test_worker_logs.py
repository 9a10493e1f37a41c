"""Crash history, worker logs and the supervisor's endpoint, with real processes.

Real nimbus processes on the shared real ZooKeeper, a real supervisor (in this process, as
in ``test_supervisor.py``) whose workers are real processes of a stand-in worker (the
features are the supervisor's, not Spark's), and the real ``stratus`` CLI as a user runs
it: a crashed worker's last crash survives its restart in ``stratus status``; ``stratus
logs`` shows the worker's output, redacted and with terminal escapes escaped, through a
standby nimbus; ``--previous`` the run before the restart; ``-f`` sees a new line appear.
The supervisor's endpoint refuses anonymous and wrong-role callers, and callers who neither
own nor read the pipeline, with JSON 401/403, audits each log read and refusal, and worker
logs rotate at the configured size.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from stratus.api.records import WorkerState
from stratus.client import NimbusClient
from stratus.config import StratusConfig
from stratus.logs import event_fields
from stratus.security.client_auth import ClientAuth
from stratus.supervisor.daemon import Supervisor
from stratus.supervisor.settings import SupervisorSettings
from tests.cluster.test_supervisor import Cluster
from tests.harness.nimbus_cluster import nimbus_cluster
from tests.harness.package_factory import valid_package
from tests.harness.zkfixtures import kazoo_client, wait_until

pytestmark = pytest.mark.spark  # starts pipeline workers (stand-ins: no JVM)

LOG_WORKER = '''
"""A stand-in worker that writes a log: it crashes on its first run when
spark.test.crash=once, prints spark.test.lines filler lines, and prints whatever the test
writes to <work_dir>/say."""
import os, signal, sys, threading, time
from pathlib import Path

from stratus.api.records import WorkerHeartbeat, WorkerState
from stratus.worker.spec import WorkerSpec, write_heartbeat

spec = WorkerSpec.read(Path(sys.argv[1]))
work = Path(spec.work_dir)
started = time.time()


def beat(state):
    write_heartbeat(spec.heartbeat_path, WorkerHeartbeat(
        pipeline=spec.pipeline, supervisor=spec.supervisor, epoch=spec.epoch,
        generation=spec.generation, digest=spec.digest, state=state, time=time.time(),
        started=started, pid=os.getpid()))


def watch_stdin():
    while os.read(0, 4096):
        pass
    os._exit(3)  # EOF: the supervisor is gone


threading.Thread(target=watch_stdin, daemon=True).start()
crashed = work / "crashed-once"
if spec.conf.get("spark.test.crash") == "once" and not crashed.exists():
    crashed.write_text("yes")
    print("first run: about to crash", flush=True)
    print("ValueError: the first run broke", file=sys.stderr, flush=True)
    sys.exit(1)
print("second run: connecting with", spec.conf.get("pipeline.env.DB_PASSWORD"), flush=True)
print("\\x1b[31mred\\x1b[0m", flush=True)
for n in range(int(spec.conf.get("spark.test.lines", 0))):
    print(f"filler {n:05d} " + "x" * 80, flush=True)
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
say = work / "say"
while not stop.is_set():
    if say.exists():
        print(say.read_text().strip(), flush=True)
        say.unlink()
    beat(WorkerState.RUNNING)
    stop.wait(spec.heartbeat_interval_secs)
beat(WorkerState.STOPPED)
'''
SECRET = "hunter2-db"


@pytest.fixture
def log_worker(tmp_path: Path) -> list[str]:
    script = tmp_path / "log_worker.py"
    script.write_text(LOG_WORKER)
    return [sys.executable, str(script)]


@contextlib.contextmanager
def running(conf: StratusConfig, command: list[str]) -> Iterator[Supervisor]:
    supervisor = Supervisor(SupervisorSettings.from_config(conf), worker_command=command)
    supervisor.start()
    try:
        yield supervisor
    finally:
        supervisor.stop(workers=True)


def stratus(*args: str, seeds: str, token: str) -> subprocess.CompletedProcess[str]:
    """The real CLI, as a user runs it, against the nimbus(es) ``seeds``, with ``token``."""
    return subprocess.run(
        [sys.executable, "-m", "stratus", *args, "-c", f"nimbus.seeds={seeds}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=user_env(token),
    )


def user_env(token: str) -> dict[str, str]:
    env = {**os.environ, "STRATUS_TOKEN": token}
    env.pop("STRATUS_CONF", None)
    return env


@dataclass(frozen=True)
class Tokens:
    """A token file of every role, and the daemons' own (read) token in a file of its own."""

    file: Path
    daemon_file: Path
    read: str
    submit: str
    admin: str
    other: str  # a submit token of another principal, which owns nothing here

    @classmethod
    def make(cls, directory: Path) -> Tokens:
        read, submit, admin, other = (secrets.token_hex(16) for _ in range(4))
        file = directory / "tokens"
        file.write_text(
            f"read token {read} principal=reader\nsubmit token {submit} principal=user\n"
            f"admin token {admin} principal=ops\nsubmit token {other} principal=other\n"
        )
        daemon_file = directory / "daemon-token"
        daemon_file.write_text(read + "\n")
        for path in (file, daemon_file):
            path.chmod(0o600)
        return cls(file, daemon_file, read, submit, admin, other)

    def options(self) -> dict[str, str]:
        return {
            "nimbus.auth.tokens.file": str(self.file),
            "client.auth.token.file": str(self.daemon_file),
        }


class Follower:
    """``stratus logs NAME -f`` in a process of its own; its output lines, as they come."""

    def __init__(self, name: str, seeds: str, token: str) -> None:
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            [sys.executable, "-m", "stratus", "logs", name, "-f", "-c", f"nimbus.seeds={seeds}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=user_env(token),
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, text: str) -> None:
        wait_until(lambda: any(text in line for line in self.lines), 60, f"{text!r} in -f")

    def interrupt(self) -> int:
        self.process.send_signal(signal.SIGINT)
        return self.process.wait(timeout=30)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def test_a_crash_survives_the_restart_in_status_and_logs_show_this_run_the_last_and_new_lines(
    zk_server, tmp_path, request, log_worker
) -> None:
    tokens = Tokens.make(tmp_path)
    admin = ClientAuth(token=tokens.admin)
    extra = [part for k, v in tokens.options().items() for part in ("-c", f"{k}={v}")]
    with (
        nimbus_cluster(
            zk_server.connect_string, tmp_path, request.node.name, 2, extra, auth=admin
        ) as nimbuses,
        kazoo_client(zk_server.connect_string) as zk,
    ):
        cluster = Cluster(zk, zk_server.connect_string, tmp_path, root=nimbuses.root)
        leader = nimbuses.wait_for_agreed_leader()
        standby = next(n.address for n in nimbuses.nimbuses if n.address != leader)
        conf = cluster.conf(**{"nimbus.code.distributor": "local", **tokens.options()})
        user = tokens.submit
        pipeline_conf: dict[str, Any] = {
            "spark.test.crash": "once",
            "pipeline.env.DB_PASSWORD": SECRET,
        }
        with (  # the user submits: the pipeline is the user's
            NimbusClient(
                nimbuses.seeds, retry_deadline=30.0, auth=ClientAuth(token=tokens.submit)
            ) as client,
            running(conf, log_worker),
        ):
            client.wait_replicated(client.submit("etl", valid_package("etl"), pipeline_conf).name)
            cluster.wait_for_worker(WorkerState.RUNNING, where=lambda b: b.restarts == 1)

            # stratus status: the crash is still there while the worker runs again
            shown = stratus("status", "etl", seeds=standby, token=user)
            assert shown.returncode == 0, shown.stderr
            assert "last crash on s1 at " in shown.stdout
            assert "(exit code 1): the worker exited with code 1:" in shown.stdout
            assert "ValueError: the first run broke" in shown.stdout
            as_json = stratus("status", "etl", "--json", seeds=standby, token=user)
            assert as_json.returncode == 0, as_json.stderr
            (worker,) = json.loads(as_json.stdout)["workers"]["workers"]
            assert (worker["state"], worker["restarts"]) == ("RUNNING", 1)
            assert worker["last_crash"]["exit_code"] == 1
            assert worker["last_crash"]["error"].endswith("ValueError: the first run broke")

            # stratus logs, through a standby: this run's output, redacted and escaped
            logs = stratus("logs", "etl", seeds=standby, token=user)
            assert logs.returncode == 0, logs.stderr
            assert "second run: connecting with ***" in logs.stdout
            assert "\\x1b[31mred\\x1b[0m" in logs.stdout
            assert SECRET not in logs.stdout and "\x1b" not in logs.stdout
            assert "first run" not in logs.stdout

            # --previous: the run before the restart, which crashed
            previous = stratus("logs", "etl", "--previous", seeds=standby, token=user)
            assert previous.returncode == 0, previous.stderr
            assert "first run: about to crash" in previous.stdout
            assert "ValueError: the first run broke" in previous.stdout
            assert "second run" not in previous.stdout

            # -f: a line written after the follow began appears, until interrupted
            assert_a_follow_sees_a_new_line(standby, user, tmp_path / "s1" / "workers" / "etl")

            missing = stratus("logs", "nope", seeds=standby, token=user)
            assert missing.returncode == 3  # not found
            assert "unknown pipeline 'nope'" in missing.stderr
            reader = stratus("logs", "etl", seeds=standby, token=tokens.read)
            assert reader.returncode == 4  # refused: a read token sees the status, not the log
            assert "reader may not read the log of pipeline 'etl'" in reader.stderr
            other = stratus("logs", "etl", seeds=standby, token=tokens.other)
            assert other.returncode == 4  # refused: another submitter does not own it
            assert "only its owners (user)" in other.stderr
            assert stratus("logs", "etl", seeds=standby, token=tokens.admin).returncode == 0

        # its supervisor is gone: each run is on record, and a log names where it stays
        assert_the_runs_outlive_their_supervisor(standby, user, tmp_path / "s1")


def test_the_endpoint_refuses_anonymous_and_wrong_role_callers_and_logs_rotate_at_their_size(
    cluster, tmp_path, log_worker, caplog
) -> None:
    caplog.set_level(logging.INFO, logger="stratus.web.audit")
    tokens = Tokens.make(tmp_path)
    read, submit = tokens.read, tokens.submit
    conf = cluster.conf(
        **{
            "nimbus.auth.tokens.file": str(tokens.file),
            "supervisor.worker.log.max.bytes": 2048,
            "supervisor.worker.log.backups": 2,
        }
    )
    meta = cluster.code.upload("etl")
    with running(conf, log_worker) as supervisor:
        assert supervisor.endpoint is not None
        address = supervisor.endpoint.address
        registration = cluster.registration()
        assert registration is not None and registration.endpoint == address
        # the leader names the owner in the assignment's conf; the endpoint judges by it
        cluster.assign(meta, conf={"spark.test.lines": 300, "pipeline.owner": "user"})
        cluster.wait_for_worker(WorkerState.RUNNING)
        directory = tmp_path / "s1" / "workers" / "etl" / "runs" / "0"  # run 0's own
        last = "filler 00299 " + "x" * 80
        wait_until(lambda: last in (directory / "worker.log").read_text(), 30, "the last line")

        # rotated at 2048 bytes, two backups: the oldest lines are gone
        files = sorted(path.name for path in directory.glob("worker*log*"))
        assert files == ["worker.log", "worker.log.1", "worker.log.2"]
        assert all((directory / name).stat().st_size <= 2048 for name in files)

        base = f"http://{address}"
        with httpx.Client(timeout=10.0) as http:
            anonymous = http.get(f"{base}/api/v1/logs/etl")
            assert anonymous.status_code == 401
            assert anonymous.json()["error"] == "unauthenticated"
            assert anonymous.headers["www-authenticate"].startswith("Bearer")
            reader = {"Authorization": f"Bearer {read}"}
            wrong_role = http.get(f"{base}/api/v1/logs/etl", headers=reader)
            assert wrong_role.status_code == 403
            assert wrong_role.json()["error"] == "forbidden"
            assert "reader may not read the log of pipeline 'etl'" in wrong_role.json()["message"]
            not_owner = http.get(
                f"{base}/api/v1/logs/etl", headers={"Authorization": f"Bearer {tokens.other}"}
            )
            assert not_owner.status_code == 403
            assert "only its owners (user)" in not_owner.json()["message"]
            admin = {"Authorization": f"Bearer {tokens.admin}"}
            assert http.get(f"{base}/api/v1/logs/etl", headers=admin).status_code == 200
            assert_audited(
                caplog,
                {
                    ("-", "logs", "etl", 401),
                    ("reader", "logs", "etl", 403),
                    ("other", "logs", "etl", 403),
                    ("ops", "logs", "etl", 200),
                },
            )
            assert http.get(f"{base}/health").status_code == 401

            shown = http.get(
                f"{base}/api/v1/logs/etl", headers={"Authorization": f"Bearer {submit}"}
            )
            assert shown.status_code == 200
            on_disk = b"".join((directory / name).read_bytes() for name in reversed(files))
            assert shown.content == on_disk  # every file of the run, oldest first
            assert shown.text.endswith(last + "\n")
            assert "filler 00000 " not in shown.text  # rotated away

            health = http.get(f"{base}/health", headers=reader)
            assert health.status_code == 200 and health.json()["healthy"] is True
            metrics = http.get(f"{base}/metrics", headers=reader)
            assert metrics.status_code == 200
            assert 'stratus_supervisor_workers{phase="running",supervisor="s1"} 1.0' in metrics.text


def assert_audited(caplog: pytest.LogCaptureFixture, expected: set[tuple[Any, ...]]) -> None:
    """The supervisor's audit lines include ``expected`` (principal, verb, pipeline, status);
    a line is written once the answer is sent, so the client may see the answer first."""

    def audited() -> list[dict[str, Any]]:
        return [event_fields(r) for r in caplog.records if r.name == "stratus.web.audit"]

    def calls() -> set[tuple[Any, ...]]:
        return {(a["principal"], a["verb"], a["pipeline"], a["status"]) for a in audited()}

    wait_until(lambda: expected <= calls(), 30, "the audit lines of the log reads")
    assert all(a["daemon"] == "supervisor" for a in audited())


def assert_the_runs_outlive_their_supervisor(seeds: str, token: str, local_dir: Path) -> None:
    listed = stratus("runs", "etl", "-o", "json", seeds=seeds, token=token)
    assert listed.returncode == 0, listed.stderr
    runs = json.loads(listed.stdout)  # the run records, newest first
    assert [(run["run"], run["outcome"]) for run in runs] == [(1, "STOPPED"), (0, "FAILED")]
    assert runs[1]["error"].endswith("ValueError: the first run broke")  # no traceback to lift
    where = local_dir / "workers" / "etl" / "runs" / "0"
    expected = f"ran on supervisor s1, which is not registered now; its log stays in {where}"
    found: list[subprocess.CompletedProcess[str]] = []

    def named() -> bool:  # once the nimbus saw the supervisor's registration go
        found[:] = [stratus("logs", "etl", "--run", "0", seeds=seeds, token=token)]
        return expected in found[0].stderr

    wait_until(named, 30, "the error to name the supervisor and the run's directory")
    assert found[0].returncode == 3  # not found


def assert_a_follow_sees_a_new_line(seeds: str, token: str, worker_dir: Path) -> None:
    follower = Follower("etl", seeds, token)
    try:
        follower.wait_for("second run: connecting with ***")
        (worker_dir / "work" / "say").write_text("a new line while following\n")
        follower.wait_for("a new line while following")
        assert follower.interrupt() == 0
    finally:
        follower.kill()


@pytest.fixture
def cluster(zk_hosts: str, tmp_path: Path) -> Iterator[Cluster]:
    with kazoo_client(zk_hosts) as zk:
        yield Cluster(zk, zk_hosts, tmp_path)
