"""Workers as other users: a hostile pipeline cannot read the daemons' secrets nor another
pipeline's files (``supervisor.worker.run.as: pool``, a root supervisor switching users).

A real ``stratus supervisor`` runs, as root, with a secret in its environment and a
configuration that names a token file; beside them lie a ZooKeeper credentials file and a
TLS key, as an operator keeps them. Two pipelines run on real Spark, each as a user of the
pool: a victim (the pass-through stream, with a secret in its conf) and a hostile one whose
function tries to read every one of those files, the supervisor's environment through
``/proc``, every other process's environment, the victim's spec, log, heartbeat and
checkpoints, and the supervisor's directories, and to signal the supervisor and the
victim's worker. It writes what it could do into its own directory. Every attempt must have
been refused; the same probe run as the supervisor's user (the control) succeeds at every
one, so the test fails if workers run as the supervisor again. Last, the victim's local
checkpoints are purged by a user of the daemons' group, as a supervisor (or a nimbus of the
host) does for a ``kill --purge``.
"""

from __future__ import annotations

import json
import os
import pwd
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from stratus.api.records import WorkerHeartbeat, WorkerState
from stratus.codedist.package_build import package_bytes
from stratus.local.processes import SupervisorProcess
from stratus.supervisor.run_logs import RUN_FILE, RUNS_DIR
from stratus.supervisor.worker_access import processes_of
from stratus.worker.checkpoint_owner import OWNERS_DIR
from tests.cluster.test_supervisor import SPARK, SPARK_SECS, Cluster
from tests.harness.spark_packages import passthrough_conf, passthrough_package, read_ids, write_ids
from tests.harness.supervisor_fakes import newest_run_log
from tests.harness.worker_users import needs_root, os_users, traversable_dir, worker_python
from tests.harness.zkfixtures import kazoo_client, process_gone, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.slow, needs_root]

ENV_SECRET = "supervisor-env-secret-0123456789"
CONF_SECRET = "victim-conf-secret-9876543210"
TARGETS_KEY = "spark.stratus.test.probe.targets"

PROBE_SOURCE = (
    '''"""A hostile pipeline: it reads what its worker must not, and says what it read."""

import json
import os
import sys
from pathlib import Path


def probe(targets):
    """For each target, "done" (a file read, a directory listed, a process that a signal
    may reach: signal 0, which only asks) or the error's name; and the other users'
    processes whose environment it could read."""
    found = {}
    for label, path in targets.items():
        try:
            if label.startswith("signal_"):
                os.kill(int(path), 0)
            elif os.path.isdir(path):
                os.listdir(path)
            else:
                with open(path, "rb") as src:
                    src.read()
            found[label] = "done"
        except OSError as exc:
            found[label] = type(exc).__name__
    me = os.getuid()
    foreign = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if entry.stat().st_uid == me:
                continue
            if (entry / "environ").read_bytes():
                foreign.append(int(entry.name))
        except OSError:
            continue
    return {"targets": found, "foreign_environ_read": foreign, "uid": me}


def run(spark, context):
    result = probe(json.loads(context.conf["'''
    + TARGETS_KEY
    + """"]))
    result["rows"] = spark.range(3).count()  # Spark runs as this user
    result["env"] = {name: os.environ.get(name) for name in ("HOME", "USER", "TMPDIR")}
    tmp = Path(os.environ["TMPDIR"]) / "probe"
    tmp.write_text("mine")
    result["tmp_mode"] = oct(os.stat(os.environ["TMPDIR"]).st_mode & 0o7777)
    Path("probe.json").write_text(json.dumps(result))


if __name__ == "__main__":  # the control: the same probe, run as the supervisor's user
    print(json.dumps(probe(json.loads(sys.argv[1]))))
"""
)


def probe_package() -> bytes:
    manifest = "name: hostile\nkind: app\nentrypoint: hostile:run\n"
    return package_bytes({"stratus.yaml": manifest, "hostile.py": PROBE_SOURCE})


SECRET_FILES = {
    "token_file": ("tokens", "admin token 9a8f0c2e4b6d1a2b3c4d5e6f\n"),
    "zookeeper_credentials": ("zookeeper.secret", "stratus:zk-password-0123\n"),
    "tls_key": ("supervisor-key.pem", "-----BEGIN PRIVATE KEY-----\nMIIE\n"),
}


def secret_files_of(directory: Path) -> dict[str, Path]:
    return {label: directory / name for label, (name, _) in SECRET_FILES.items()}


def secret_files(directory: Path) -> dict[str, Path]:
    """The operator's files, 0600 root's, as in /etc/stratus."""
    directory.mkdir(mode=0o755)
    for label, path in secret_files_of(directory).items():
        path.write_text(SECRET_FILES[label][1])
        path.chmod(0o600)
    return secret_files_of(directory)


def show_logs(base: Path) -> None:
    """The supervisor's log and its workers', printed (gone with the directory after)."""
    for path in sorted(base.rglob("*.log")):
        print(f"==== {path}\n{path.read_text(errors='replace')[-6000:]}")


def owner(path: Path) -> str:
    return pwd.getpwuid(path.stat().st_uid).pw_name


def start_supervisor(cluster: Cluster, base: Path, users: list[str]) -> SupervisorProcess:
    """A ``stratus supervisor`` as root, its workers as ``users``, a secret in its
    environment and its configuration in a 0600 file that names the token file."""
    secrets = secret_files(base / "etc")
    config = base / "etc" / "supervisor.yaml"
    config.write_text(
        f"nimbus.auth.tokens.file: {secrets['token_file']}\n"
        "supervisor.slots: 2\n"
        "supervisor.worker.run.as: pool\n"
        f"supervisor.worker.users: [{users[0]}, {users[1]}]\n"
    )
    config.chmod(0o600)
    options = cluster.options(**SPARK, **{"pipeline.checkpoint.root": base / "checkpoints"})
    supervisor = SupervisorProcess(
        options,
        id="s1",
        slots=2,
        log_dir=base,
        command_prefix=[
            *("env", f"STRATUS_CONF={config}", f"STRATUS_TOKEN={ENV_SECRET}"),
            # the supervisor, hence its workers, on an interpreter they may run
            *("/bin/sh", "-c", f'shift; exec {worker_python(base)} "$@"', "sh"),
        ],
    )
    supervisor.start()
    return supervisor


def run_victim(cluster: Cluster, data: Path, user: str) -> WorkerHeartbeat:
    """The pass-through stream, a secret in its conf, once its first rows are out."""
    conf = passthrough_conf(data / "in", data / "out" / "victim")
    conf["spark.stratus.secret.password"] = CONF_SECRET
    (data / "out").mkdir()
    os.chown(data / "out", pwd.getpwnam(user).pw_uid, -1)  # where it may write
    cluster.assign(
        cluster.code.upload("victim", passthrough_package("victim")), "victim", conf=conf
    )
    beat = cluster.wait_for_worker(
        WorkerState.RUNNING, "victim", where=lambda b: bool(b.app_id), timeout=SPARK_SECS
    )
    write_ids(data / "in", range(5))
    wait_until(lambda: read_ids(data / "out" / "victim") == list(range(5)), 60, "its rows")
    return beat


def probe_targets(base: Path, supervisor: SupervisorProcess, victim_pid: int) -> dict[str, str]:
    """What the hostile pipeline tries to read or signal: all refused to it, but the lease."""
    local, checkpoints = supervisor.local_dir, base / "checkpoints"
    victim = local / "workers" / "victim"
    return {
        "supervisor_environ": f"/proc/{supervisor.pid}/environ",
        **{label: str(path) for label, path in secret_files_of(base / "etc").items()},
        "supervisor_config": str(base / "etc" / "supervisor.yaml"),
        "victim_spec": str(victim / "spec.json"),
        "victim_worker_spec": str(victim / "work" / "spec.json"),
        "victim_log": str(newest_run_log(local, "victim")),  # its running run's
        "victim_run_logs": str(victim / RUNS_DIR),
        "victim_run_number": str(victim / RUN_FILE),
        "victim_heartbeat": str(victim / "work" / "heartbeat.json"),
        "victim_checkpoints": str(checkpoints / "victim"),
        "victim_owners": str(checkpoints / "victim" / OWNERS_DIR),
        "victim_tmp": str(victim / "work" / "tmp"),
        "supervisor_local_dir": str(local),
        "supervisor_workers_dir": str(local / "workers"),
        "supervisor_lease_is_readable": str(local / "lease"),
        "signal_supervisor": str(supervisor.pid),
        "signal_victim": str(victim_pid),
    }


def control_probe(targets: dict[str, str]) -> dict[str, Any]:
    """The same probe, run as the supervisor's user (what workers were before)."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE_SOURCE, json.dumps(targets)],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def purge_as_the_daemons_group(python: str, checkpoints: Path, as_user: str) -> None:
    """``kill --purge``'s deletion of the victim's checkpoints, run by a user that is not
    the victim's but is in the supervisor's group (root's here), as a supervisor that is not
    root (or a nimbus of the host) is."""
    checkpoints.chmod(0o775)  # the operator's root: the daemons' group may write it
    user = pwd.getpwnam(as_user)
    code = "import sys; from stratus.checkpoints import remove_checkpoints as r; "
    code += "sys.exit(0 if r(sys.argv[1], 'victim') else 1)"
    subprocess.run(
        [python, "-c", code, str(checkpoints)],
        check=True,
        user=user.pw_uid,
        group=user.pw_gid,
        extra_groups=[os.getgid()],
        cwd="/",
    )


def test_a_hostile_pipeline_reads_neither_the_daemons_secrets_nor_another_pipelines_files(
    zk_hosts: str,
) -> None:
    with traversable_dir() as base, os_users(2) as users, kazoo_client(zk_hosts) as zk:
        cluster = Cluster(zk, zk_hosts, base)
        supervisor = start_supervisor(cluster, base, users)
        try:
            supervisor.wait_ready()
            local, checkpoints = supervisor.local_dir, base / "checkpoints"
            victim = run_victim(cluster, base / "data", users[0])

            # the victim runs as the pool's first user, its files are walled off
            victim_uid = pwd.getpwnam(users[0]).pw_uid
            assert victim.pid is not None
            assert Path(f"/proc/{victim.pid}").stat().st_uid == victim_uid
            assert owner(local / "workers" / "victim" / "work") == users[0]
            assert owner(checkpoints / "victim") == users[0]
            assert stat.S_IMODE((checkpoints / "victim").stat().st_mode) == 0o2770
            assert CONF_SECRET in (local / "workers" / "victim" / "spec.json").read_text()

            targets = probe_targets(base, supervisor, victim.pid)
            conf: dict[str, Any] = {TARGETS_KEY: json.dumps(targets)}
            cluster.assign(cluster.code.upload("hostile", probe_package()), "hostile", conf=conf)
            cluster.wait_for_worker(WorkerState.FINISHED, "hostile", timeout=SPARK_SECS)
            found = json.loads((local / "workers" / "hostile" / "work" / "probe.json").read_text())

            hostile = pwd.getpwnam(users[1])
            assert found["uid"] == hostile.pw_uid  # the other user of the pool
            assert found["rows"] == 3
            assert found["env"] == {
                "HOME": hostile.pw_dir,
                "USER": users[1],
                "TMPDIR": str(local / "workers" / "hostile" / "work" / "tmp"),
            }
            assert found["tmp_mode"] == "0o700"
            refused = {label: how for label, how in found["targets"].items() if how != "done"}
            assert set(refused) == set(targets) - {"supervisor_lease_is_readable"}, found
            assert set(refused.values()) == {"PermissionError"}, found
            assert found["foreign_environ_read"] == [], found

            # the control: the same probe as the supervisor's user reads every one of them
            control = control_probe(targets)
            assert set(control["targets"].values()) == {"done"}, control
            assert control["foreign_environ_read"], control
            assert ENV_SECRET.encode() in Path(targets["supervisor_environ"]).read_bytes()

            # a pool's user is free again only once nothing of it runs; its checkpoints can
            # be purged by the daemons' group
            cluster.unassign("victim")
            wait_until(lambda: process_gone(victim.pid or 0), 60, "the victim's worker to stop")
            wait_until(lambda: not processes_of(victim_uid), 30, "every process of its user")
            purge_as_the_daemons_group(worker_python(base), checkpoints, users[1])
            assert not (checkpoints / "victim").exists()
        finally:
            supervisor.stop(workers=True)
            show_logs(base)  # pytest prints them if the test failed
