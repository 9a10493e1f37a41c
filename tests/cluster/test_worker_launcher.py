"""The privileged step of workers run as other users: the worker launcher's refusals, the
pool's choice of users, a supervisor that reaches its workers directly (as root) and through
the launcher, and one that is not root and goes through real sudo.

Most launcher tests run it as root directly, with its configuration in a directory of the
test; the last one writes a sudoers file (removed afterwards) and runs the supervisor as a
user of its own, as deploy/ does, and is skipped where sudo is not installed."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pwd
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stratus.api.purges import PurgeCause, PurgeOrder, PurgeOutcome
from stratus.api.records import FencingToken, WorkerState
from stratus.config import load_config
from stratus.errors import ConfigError
from stratus.process import ProcessGroup
from stratus.supervisor.daemon import Supervisor
from stratus.supervisor.errors import SupervisorStartError, WorkerUserError
from stratus.supervisor.run_as import DirectSwitch, UserPool
from stratus.supervisor.settings import SupervisorSettings, UserSettings
from stratus.supervisor.worker_access import (
    ENV_FILE,
    WORK_DIR,
    WORKER_UMASK,
    WorkerUser,
    closed_to_others,
    group_default_acl,
    prepare_worker,
    processes_of,
    resolve_user,
)
from stratus.supervisor.worker_launcher import REFUSED_EXIT, main
from stratus.worker.spec import HEARTBEAT_FILE, SPEC_FILE, WorkerSpec
from stratus.zk.paths import ClusterPaths
from tests.cluster.test_supervisor import SUPERVISOR_WITH_STAND_IN, Cluster, running
from tests.cluster.test_trail_cluster import RECORDING_WORKER
from tests.harness.worker_users import needs_root, os_users, traversable_dir, worker_python
from tests.harness.zkfixtures import kazoo_client, wait_until

LAUNCHER_SCRIPT = """
import sys
from pathlib import Path
from stratus.supervisor.worker_launcher import main
sys.exit(main(config_path=Path({config!r})))
"""


# ---------------------------------------------------------------------- the pool (pure logic)


class NoSwitch(DirectSwitch):
    """Records the clean-ups it is asked for, and does none."""

    def __init__(self) -> None:
        super().__init__(group=0)
        self.killed: list[str] = []

    def kill_all(self, user: WorkerUser) -> None:
        self.killed.append(user.name)


def users(*names: str) -> list[WorkerUser]:
    return [WorkerUser(name, 2000 + n, 2000 + n, f"/home/{name}") for n, name in enumerate(names)]


def test_a_pool_gives_running_pipelines_distinct_users_and_a_restart_its_last_one() -> None:
    switch = NoSwitch()
    pool = UserPool(users("w1", "w2"), switch, shared=False)
    etl, report = pool.take("etl"), pool.take("report")
    assert (etl.user.name, report.user.name) == ("w1", "w2")
    with pytest.raises(WorkerUserError, match=r"every user of supervisor\.worker\.users"):
        pool.take("third")
    etl.finished()
    assert switch.killed == ["w1"]  # what it left running dies before the user is reused
    report.finished()
    assert pool.take("report").user.name == "w2"  # its last user, though w1 is free too


def test_a_shared_user_is_never_killed_whole_when_one_worker_exits() -> None:
    switch = NoSwitch()
    pool = UserPool(users("shared"), switch, shared=True)
    first, second = pool.take("etl"), pool.take("report")
    assert first.user == second.user
    first.finished()
    assert switch.killed == []


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("no-such-user-of-stratus", "does not exist on this host"),
        ("root", "banned"),
        ("daemon", "below the minimum 1000"),
    ],
)
def test_a_worker_user_must_exist_and_be_neither_root_nor_a_system_account(name, message) -> None:
    settings = UserSettings(run_as="shared", users=(name,), launcher="direct")
    with pytest.raises(WorkerUserError, match=message):
        UserPool.from_settings(settings, group=os.getgid())


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"supervisor.worker.run.as": "pool", "supervisor.worker.users": "[a]"}, "at least"),
        ({"supervisor.worker.run.as": "shared", "supervisor.worker.users": "[a, b]"}, "exactly"),
        ({"supervisor.worker.users": "[a]"}, "supervisor.worker.run.as"),
        ({"supervisor.worker.run.as": "shared", "supervisor.worker.users": "[root]"}, "root"),
        (
            {
                "supervisor.worker.run.as": "shared",
                "supervisor.worker.users": "[a]",
                "supervisor.worker.warm": "true",
            },
            "warm",
        ),
    ],
)
def test_worker_users_that_cannot_work_are_refused_at_load(overrides, message) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(
            overrides=["supervisor.slots=2", *[f"{k}={v}" for k, v in overrides.items()]],
            environ={},
        )


# ---------------------------------------------------------------------- the launcher (root)


@pytest.fixture
def walls() -> Iterator[tuple[Path, list[str]]]:
    if os.geteuid() != 0:
        pytest.skip("creates operating-system users and switches to them: needs root")
    with traversable_dir() as base, os_users(2) as names:
        yield base, names


def launcher_config(
    base: Path,
    allowed: list[str],
    *,
    local_dir: Path | None = None,
    extra: dict[str, Any] | None = None,
) -> Path:
    directory = base / "etc"
    directory.mkdir(mode=0o755, exist_ok=True)
    config = directory / "worker-launcher.cfg"
    values = {
        "supervisor.user": "root",
        "supervisor.local.dir": str(local_dir or base / "s1"),
        "pipeline.checkpoint.root": str(base / "checkpoints"),
        "allowed.users": allowed,
        "min.uid": 1000,
        **(extra or {}),
    }
    config.write_text(json.dumps(values))
    config.chmod(0o644)
    return config


@needs_root
def test_the_launcher_refuses_users_it_does_not_allow(walls, capsys) -> None:
    base, (allowed, other) = walls
    config = launcher_config(base, [allowed, "daemon", "root"], extra={"banned.users": [allowed]})
    cases = {
        other: "not in allowed.users",
        allowed: "banned",
        "daemon": "below the minimum",
        "root": "banned",
    }
    for name, why in cases.items():
        assert main(["kill-user", name], config_path=config) == REFUSED_EXIT
        assert why in capsys.readouterr().err
    launch = ["launch", "etl", other, "--", "/bin/true"]
    assert main(launch, config_path=config) == REFUSED_EXIT


@needs_root
def test_the_launcher_refuses_a_configuration_others_could_write(walls, capsys) -> None:
    base, (allowed, _) = walls
    config = launcher_config(base, [allowed])
    config.chmod(0o666)
    assert main(["kill-user", allowed], config_path=config) == REFUSED_EXIT
    assert "writable by root alone" in capsys.readouterr().err


@needs_root
def test_the_launcher_signals_only_its_users_processes_in_the_group(walls) -> None:
    base, (allowed, _) = walls
    config = launcher_config(base, [allowed])
    uid = pwd.getpwnam(allowed).pw_uid
    mine = subprocess.Popen(["sleep", "600"], start_new_session=True)  # root's, not the user's
    theirs = subprocess.Popen(["sleep", "600"], user=uid, start_new_session=True)
    # as sudo is: a root process whose child runs as the user
    relay = f"import subprocess; subprocess.run(['sleep', '600'], user={uid})"
    sudo = subprocess.Popen([sys.executable, "-c", relay], start_new_session=True)
    try:
        args = ["signal", allowed, str(mine.pid), "KILL", "--all"]
        assert main(args, config_path=config) == 0
        assert mine.poll() is None  # root's process is not the user's: untouched
        assert main(["signal", allowed, str(theirs.pid), "TERM"], config_path=config) == 0
        assert theirs.wait(10) == -signal.SIGTERM
        wait_until(lambda: processes_of(uid), 10, "the relayed worker to start")
        assert main(["signal", allowed, str(sudo.pid), "TERM"], config_path=config) == 0
        assert sudo.wait(10) == 0  # its child ended by the signal, so did it
        assert sudo.poll() == 0 and not processes_of(uid)
    finally:
        for process in (mine, theirs, sudo):
            process.kill()
            process.wait()


@needs_root
@pytest.mark.spark  # starts pipeline workers (stand-ins: no JVM)
@pytest.mark.parametrize("launcher", ["direct", "sudo"])
def test_a_supervisor_runs_stops_and_cleans_up_workers_as_other_users(
    walls, zk_hosts, launcher
) -> None:
    """``direct``: the supervisor (root) switches users itself; ``sudo``: it goes through
    the launcher for every step, as a supervisor that is not root does."""
    base, names = walls
    config = launcher_config(base, names)
    script = base / "launcher.py"
    script.write_text(LAUNCHER_SCRIPT.format(config=str(config)))
    with kazoo_client(zk_hosts) as zk:
        cluster = Cluster(zk, zk_hosts, base)
        cluster.worker_command[0] = worker_python(base)
        conf = cluster.conf(
            "s1",
            **{
                "supervisor.slots": 2,
                "supervisor.worker.run.as": "pool",
                "supervisor.worker.users": f"{names[0]},{names[1]}",
                "supervisor.worker.launcher": launcher,
                "supervisor.worker.launcher.command": f"[{sys.executable}, {script}]",
                "pipeline.checkpoint.root": base / "checkpoints",
            },
        )
        with running(conf, cluster) as supervisor:
            cluster.assign(cluster.code.upload("etl"), "etl", mode="env")
            beat = cluster.wait_for_worker(WorkerState.RUNNING, "etl")
            cluster.assign(cluster.code.upload("report"), "report", mode="detach")
            other = cluster.wait_for_worker(WorkerState.RUNNING, "report")
            work = supervisor.local_dir / "workers" / "etl" / "work"
            environ = json.loads((work / "env.json").read_text())
            user = resolve_user(names[0], min_uid=1000)
            assert (work / "env.json").stat().st_uid == user.uid  # the worker wrote it
            assert (environ["USER"], environ["HOME"]) == (names[0], user.home)
            assert (base / "checkpoints" / "etl").stat().st_uid == user.uid
            assert beat.pid is not None and beat.pid in processes_of(user.uid)
            second = resolve_user(names[1], min_uid=1000)
            assert other.pid is not None and other.pid in processes_of(second.uid)

            cluster.unassign("etl")  # SIGTERM (through the launcher), then the clean-up
            wait_until(lambda: cluster.worker_beat("etl") is None, 30, "the worker to stop")
            wait_until(lambda: not processes_of(user.uid), 30, "its user's processes to go")
            assert other.pid in processes_of(second.uid)  # the other pipeline's user: untouched

            # what a pipeline left running out of its process group goes with its worker
            assert len(processes_of(second.uid)) >= 2
            cluster.unassign("report")
            wait_until(lambda: cluster.worker_beat("report") is None, 30, "the worker to stop")
            wait_until(lambda: not processes_of(second.uid), 30, "what it left behind to go")


@needs_root
@pytest.mark.spark  # starts pipeline workers (stand-ins: no JVM)
@pytest.mark.parametrize("launcher", ["direct", "sudo"])
def test_a_worker_of_another_user_is_adopted_across_a_restart_and_cleaned_up_after(
    walls, zk_hosts, launcher
) -> None:
    """A supervisor that leaves its worker of a pool user; the next one takes the same user
    for it, signals it through the switch and cleans up after it as after its own."""
    base, names = walls
    config = launcher_config(base, names)
    script = base / "launcher.py"
    script.write_text(LAUNCHER_SCRIPT.format(config=str(config)))
    user = resolve_user(names[0], min_uid=1000)
    with kazoo_client(zk_hosts) as zk:
        cluster = Cluster(zk, zk_hosts, base)
        cluster.worker_command[0] = worker_python(base)
        conf = cluster.conf(
            "s1",
            **{
                "supervisor.slots": 2,
                "supervisor.fence.timeout.secs": 6.0,
                "nimbus.supervisor.timeout.secs": 10.0,
                "supervisor.worker.run.as": "pool",
                "supervisor.worker.users": f"{names[0]},{names[1]}",
                "supervisor.worker.launcher": launcher,
                "supervisor.worker.launcher.command": f"[{sys.executable}, {script}]",
                "pipeline.checkpoint.root": base / "checkpoints",
            },
        )
        first = Supervisor(
            SupervisorSettings.from_config(conf), worker_command=cluster.worker_command
        )
        first.start()
        try:
            cluster.assign(cluster.code.upload("etl"), "etl")
            beat = cluster.wait_for_worker(WorkerState.RUNNING, "etl")
            assert beat.pid is not None and beat.pid in processes_of(user.uid)
        finally:
            first.stop()  # its worker runs on
        assert beat.pid in processes_of(user.uid)
        back = time.time()
        with running(conf, cluster):
            cluster.wait_for_worker(
                WorkerState.RUNNING, "etl", where=lambda b: b.pid == beat.pid and b.time > back
            )
            cluster.unassign("etl")  # SIGTERM through the switch, then the user's clean-up
            wait_until(lambda: cluster.worker_beat("etl") is None, 30, "the worker to stop")
            wait_until(lambda: not processes_of(user.uid), 30, "its user's processes to go")


@needs_root
def test_a_pipelines_files_pass_to_its_next_user_without_following_links(walls) -> None:
    base, (first, second) = walls
    a, b = resolve_user(first, min_uid=1000), resolve_user(second, min_uid=1000)
    directory, checkpoints = base / "s1" / "workers" / "etl", base / "checkpoints" / "etl"
    prepare_worker(directory, b"{}", a, group=0, checkpoint_dir=checkpoints)
    left = directory / "work" / "left-by-a"
    left.write_text("a's")
    os.chown(left, a.uid, a.gid)
    (directory / "work" / "passwd").symlink_to("/etc/passwd")  # a trap for a chown that follows
    os.link(left, base / "elsewhere")  # a file with two links may be someone else's too

    prepare_worker(directory, b"{}", b, group=0, checkpoint_dir=checkpoints)
    assert Path("/etc/passwd").stat().st_uid == 0
    assert (directory / "work").stat().st_uid == b.uid
    assert (directory / "work" / "spec.json").stat().st_uid == b.uid
    assert left.stat().st_uid == a.uid  # two links: left alone
    assert checkpoints.stat().st_uid == b.uid
    assert oct(directory.stat().st_mode & 0o7777) == "0o711"
    assert oct(checkpoints.stat().st_mode & 0o7777) == "0o2770"
    assert os.getxattr(checkpoints, "system.posix_acl_default") == group_default_acl(0)


@needs_root
@pytest.mark.spark  # starts pipeline workers (stand-ins: no JVM)
def test_a_worker_of_another_user_appends_to_the_history_file_it_may_not_open(
    walls, zk_hosts
) -> None:
    """The supervisor's history file stays its own (0600), yet a worker of the pool records
    its start and batches in it, through a descriptor that only appends."""
    base, names = walls
    history = base / "history.jsonl"
    stand_in = base / "recording_worker.py"
    stand_in.write_text(RECORDING_WORKER)
    user = resolve_user(names[0], min_uid=1000)
    with kazoo_client(zk_hosts) as zk:
        cluster = Cluster(zk, zk_hosts, base)
        cluster.worker_command[:] = [worker_python(base), str(stand_in)]
        conf = cluster.conf(
            "s1",
            **{
                "supervisor.slots": 2,
                "supervisor.worker.run.as": "pool",
                "supervisor.worker.users": f"{names[0]},{names[1]}",
                "pipeline.checkpoint.root": base / "checkpoints",
                "history.file": history,
            },
        )
        with running(conf, cluster):
            cluster.assign(cluster.code.upload("etl"), "etl")
            beat = cluster.wait_for_worker(WorkerState.RUNNING, "etl")
            assert beat.pid is not None and beat.pid in processes_of(user.uid)
            wait_until(lambda: b'"batch_committed"' in history.read_bytes(), 30, "a batch")

    lines = [json.loads(line) for line in history.read_text().splitlines()]
    assert {line["event"] for line in lines} >= {"worker_started", "batch_committed"}
    assert {line["pid"] for line in lines} == {beat.pid}
    assert (history.stat().st_uid, oct(history.stat().st_mode & 0o777)) == (0, "0o600")


# what a streaming worker does to its checkpoints: a directory whose mode it sets (as Spark
# does, which drops the setgid bit), a batch's file in it; then the next user reads that
# batch, writes the next one, and replaces and deletes what the former user wrote
WRITES_A_BATCH = "mkdir offsets && chmod 770 offsets && echo 0 > offsets/0 && echo a > meta"
RESUMES = (
    "cat offsets/0 && echo 1 > offsets/1 && echo b > meta.tmp && mv meta.tmp meta "
    "&& rm offsets/0 && mkdir offsets/sub"
)


def run_as(user: WorkerUser, script: str, cwd: Path) -> int:
    """``script`` in a shell as ``user``, as a worker runs (umask 007, its own groups)."""
    return subprocess.run(
        ["/bin/sh", "-c", script],
        user=user.uid,
        group=user.gid,
        extra_groups=user.groups(),
        umask=WORKER_UMASK,
        cwd=cwd,
        capture_output=True,
        check=False,
    ).returncode


@needs_root
def test_checkpoints_a_worker_wrote_on_one_supervisor_pass_to_another_supervisors_user(
    walls,
) -> None:
    """A pipeline moved from one supervisor (its worker a user of that one's pool) to
    another (a user of its own) resumes where the first left off: the second supervisor
    hands it what the first user wrote."""
    base, (first, second) = walls
    a, b = resolve_user(first, min_uid=1000), resolve_user(second, min_uid=1000)
    checkpoints = base / "checkpoints" / "etl"  # a root both supervisors' hosts mount
    prepare_worker(base / "s1" / "workers" / "etl", b"{}", a, group=0, checkpoint_dir=checkpoints)
    assert run_as(a, WRITES_A_BATCH, checkpoints) == 0
    assert run_as(b, RESUMES, checkpoints) != 0  # not yet b's

    prepare_worker(base / "s2" / "workers" / "etl", b"{}", b, group=0, checkpoint_dir=checkpoints)

    assert run_as(b, RESUMES, checkpoints) == 0
    assert sorted(path.name for path in (checkpoints / "offsets").iterdir()) == ["1", "sub"]
    assert (checkpoints / "meta").read_text() == "b\n"
    assert {path.stat().st_uid for path in checkpoints.rglob("*")} == {b.uid}


def test_a_directory_closed_to_other_users_on_the_way_is_named() -> None:
    with traversable_dir() as base:
        closed, inner = base / "closed", base / "closed" / "open" / "workers"
        inner.mkdir(parents=True)
        closed.chmod(0o700)  # as pytest's own /tmp/pytest-of-root
        assert closed_to_others(inner) == closed
        closed.chmod(0o711)
        assert closed_to_others(inner) is None


# ---------------------------------------------------------------------- the supervisor's start


def test_a_supervisor_whose_workers_run_as_itself_says_so(zk_hosts, tmp_path, caplog) -> None:
    with kazoo_client(zk_hosts) as zk:
        cluster = Cluster(zk, zk_hosts, tmp_path)
        with caplog.at_level(logging.WARNING), running(cluster.conf(), cluster):
            pass
    assert "event=workers_run_as_supervisor" in caplog.text
    assert "supervisor.worker.run.as" in caplog.text


@needs_root
def test_a_supervisor_refuses_worker_users_that_cannot_reach_its_directory(
    walls, zk_hosts, tmp_path
) -> None:
    _base, names = walls
    with kazoo_client(zk_hosts) as zk:
        cluster = Cluster(zk, zk_hosts, tmp_path)  # pytest's own directory: 0700
        conf = cluster.conf(
            "s1",
            **{"supervisor.worker.run.as": "shared", "supervisor.worker.users": names[0]},
        )
        supervisor = Supervisor(
            SupervisorSettings.from_config(conf), worker_command=cluster.worker_command
        )
        with pytest.raises(SupervisorStartError, match=r"closed to them \(no o\+x\)"):
            supervisor.start()
        supervisor.stop(workers=True)


# ---------------------------------------------------------------------- through sudo, for real

SUDOERS = """Defaults!{launcher} !use_pty, !log_output, !requiretty, env_reset
{supervisor} ALL=(root) NOPASSWD: {launcher}
"""
ROOT_LAUNCHER = """#!{python}
import sys
from pathlib import Path
from stratus.supervisor.worker_launcher import main
sys.exit(main(config_path=Path({config!r})))
"""


@contextlib.contextmanager
def sudoers(name: str, text: str) -> Iterator[None]:
    """A file of /etc/sudoers.d, checked by visudo, removed afterwards."""
    path = Path("/etc/sudoers.d") / name
    path.write_text(text)
    path.chmod(0o440)
    try:
        subprocess.run(["visudo", "-cf", str(path)], check=True, capture_output=True)
        yield
    finally:
        path.unlink(missing_ok=True)


@needs_root
@pytest.mark.spark  # starts pipeline workers (stand-ins: no JVM)
@pytest.mark.skipif(shutil.which("sudo") is None, reason="sudo is not installed")
def test_a_supervisor_that_is_not_root_runs_its_workers_through_sudo(zk_hosts) -> None:
    with traversable_dir() as base, os_users(3) as (owner, first, second):
        python = worker_python(base)
        launcher = base / "stratus-worker-launcher"
        supervisor_user = pwd.getpwnam(owner)
        home = base / "supervisor"  # the supervisor's own, as /var/lib/stratus is
        home.mkdir(mode=0o711)
        os.chown(home, supervisor_user.pw_uid, supervisor_user.pw_gid)
        config = launcher_config(
            base, [first, second], local_dir=home / "s1", extra={"supervisor.user": owner}
        )
        launcher.write_text(ROOT_LAUNCHER.format(python=sys.executable, config=str(config)))
        launcher.chmod(0o755)
        with (
            sudoers(f"stratus-test-{owner}", SUDOERS.format(launcher=launcher, supervisor=owner)),
            kazoo_client(zk_hosts) as zk,
        ):
            cluster = Cluster(zk, zk_hosts, base)
            overrides = cluster.overrides(
                "s1",
                **{
                    "supervisor.local.dir": home / "s1",
                    "supervisor.slots": 2,
                    "supervisor.worker.run.as": "pool",
                    "supervisor.worker.users": f"{first},{second}",
                    "supervisor.worker.launcher.command": f"[sudo, -n, {launcher}]",
                    "pipeline.checkpoint.root": base / "checkpoints",
                },
            )
            script = base / "supervisor.py"
            script.write_text(SUPERVISOR_WITH_STAND_IN)
            argv = ["runuser", "-u", owner, "--", python, str(script), cluster.worker_command[1]]
            with (base / "supervisor.log").open("ab") as log:
                supervisor = ProcessGroup.start(
                    [*argv, *overrides], stdout=log, stderr=subprocess.STDOUT, cwd=home
                )
            try:
                cluster.assign(cluster.code.upload("etl"), "etl", mode="env")
                beat = cluster.wait_for_worker(WorkerState.RUNNING, "etl")
                user = resolve_user(first, min_uid=1000)
                assert beat.pid is not None and beat.pid in processes_of(user.uid)
                work = home / "s1" / "workers" / "etl" / "work"
                environ = json.loads((work / "env.json").read_text())
                assert environ["USER"] == first and "SUDO_UID" not in environ
                stat_line = Path(f"/proc/{beat.pid}/stat").read_text()
                parent = int(stat_line.rsplit(")", 1)[1].split()[1])
                assert Path(f"/proc/{parent}/comm").read_text().strip() == "sudo"
                spec = home / "s1" / "workers" / "etl" / "spec.json"
                assert spec.stat().st_uid == supervisor_user.pw_uid  # not root's

                cluster.unassign("etl")  # SIGTERM through sudo and the launcher
                wait_until(lambda: cluster.worker_beat("etl") is None, 30, "the worker to stop")
                wait_until(lambda: not processes_of(user.uid), 30, "its user's processes to go")

                purge_what_the_supervisor_cannot(zk, cluster, base / "checkpoints", user)
            finally:
                supervisor.stop(grace=10)
                print((base / "supervisor.log").read_text()[-8000:])


def purge_what_the_supervisor_cannot(
    zk: Any, cluster: Cluster, root: Path, user: WorkerUser
) -> None:
    """A purge, handed to the supervisor s1 (not root), of checkpoints a worker's user wrote
    beyond the daemons' group's rights (a directory of its own, 0700, its own group): the
    supervisor's own deletion is refused, the worker launcher's through sudo is not."""
    checkpoints = root / "etl"
    private = checkpoints / "lost-group"
    private.mkdir(parents=True, exist_ok=True)
    (private / "0").write_text("v1\n")
    for path in (private, private / "0"):
        os.chown(path, user.uid, user.gid)
    private.chmod(0o700)
    paths = ClusterPaths(cluster.root)
    zk.ensure_path(paths.purge_outcomes)
    order = PurgeOrder(
        pipeline="etl",
        root=str(root),
        cause=PurgeCause.KILL,
        requested=time.time(),
        epoch=1,
        attempt=1,
        supervisor="s1",
    )
    zk.create(paths.purge("etl"), order.encode(), makepath=True)
    node = paths.purge_outcome(f"etl.{order.id}.1")
    wait_until(lambda: zk.exists(node), 30, "the supervisor's answer")
    outcome = PurgeOutcome.model_validate_json(zk.get(node)[0])
    assert (outcome.done, outcome.error) == (True, None)
    assert not checkpoints.exists()


@needs_root
def test_a_directory_a_worker_swapped_for_a_link_is_refused_not_followed(walls) -> None:
    base, (name, _) = walls
    user = resolve_user(name, min_uid=1000)
    directory = base / "s1" / "workers" / "etl"
    prepare_worker(directory, b"{}", user, group=0, checkpoint_dir=None)
    tmp = directory / "work" / "tmp"
    tmp.rmdir()
    tmp.symlink_to("/etc")  # the worker's user may do this in its own directory
    etc = os.stat("/etc")
    with pytest.raises(WorkerUserError, match="not a directory"):
        prepare_worker(directory, b"{}", user, group=0, checkpoint_dir=None)
    after = os.stat("/etc")
    assert (after.st_uid, after.st_gid, after.st_mode) == (etc.st_uid, etc.st_gid, etc.st_mode)
    with pytest.raises(WorkerUserError, match="not the supervisor's directory"):
        prepare_worker(directory, b"{}", user, group=0, checkpoint_dir=None, owner=12345)


@needs_root
def test_the_launcher_purges_a_worker_users_checkpoints_under_its_own_root_only(
    walls, capsys
) -> None:
    base, (allowed, _) = walls
    config = launcher_config(base, [allowed])
    root = base / "checkpoints"
    uid = pwd.getpwnam(allowed).pw_uid
    private = root / "etl" / "query" / "offsets"  # a worker's, its group's rights lost
    private.mkdir(parents=True)
    (private / "0").write_text("v1\n")
    for path in (root / "etl", root / "etl" / "query", private, private / "0"):
        os.chown(path, uid, uid)
        path.chmod(0o700 if path.is_dir() else 0o600)
    (root / "report").mkdir()

    assert main(["purge", "etl", str(base / "elsewhere")], config_path=config) == REFUSED_EXIT
    assert "is not the launcher's pipeline.checkpoint.root" in capsys.readouterr().err
    assert main(["purge", "../etc", str(root)], config_path=config) == REFUSED_EXIT
    assert "invalid pipeline name" in capsys.readouterr().err
    assert private.is_dir()

    assert main(["purge", "etl", str(root)], config_path=config) == 0
    assert not (root / "etl").exists()
    assert (root / "report").is_dir()


@needs_root
def test_a_standby_workers_user_takes_the_checkpoints_at_its_promotion_not_at_its_start(
    walls, capsys
) -> None:
    """A hot pipeline's active worker (a user of one supervisor's pool) writes on while its
    standby worker (another user, on another supervisor) starts: the standby's start leaves
    the checkpoints alone, and its promotion gives them to its user, through the launcher
    (``launch-standby``, ``take-checkpoints``) as directly."""
    base, (first, second) = walls
    a, b = resolve_user(first, min_uid=1000), resolve_user(second, min_uid=1000)
    checkpoints = base / "checkpoints" / "etl"
    prepare_worker(base / "s1" / "workers" / "etl", b"{}", a, group=0, checkpoint_dir=checkpoints)
    assert run_as(a, WRITES_A_BATCH, checkpoints) == 0

    standby = base / "s2" / "workers" / "etl"
    spec = (
        WorkerSpec(
            pipeline="etl",
            supervisor="s2",
            epoch=1,
            generation=0,
            token=FencingToken(era=1, zxid=0),
            digest="0" * 64,
            kind="app",
            entrypoint="etl:run",
            code_dir=base / "code",
            work_dir=standby / WORK_DIR,
            conf={},
            spark_master="local[1]",
            checkpoint_location=str(checkpoints),
            heartbeat_path=standby / WORK_DIR / HEARTBEAT_FILE,
            heartbeat_interval_secs=0.5,
            stop_grace_secs=1.0,
        )
        .model_dump_json()
        .encode()
    )
    standby.mkdir(parents=True)
    (standby / SPEC_FILE).write_bytes(spec)
    (standby / SPEC_FILE).chmod(0o600)
    (standby / ENV_FILE).write_text("{}")
    (standby / ENV_FILE).chmod(0o600)
    config = launcher_config(base, [second], local_dir=base / "s2")
    started = subprocess.run(  # launch-standby execs the worker: in a child of its own
        [
            sys.executable,
            "-c",
            LAUNCHER_SCRIPT.format(config=str(config)),
            "launch-standby",
            "etl",
            second,
            "--",
            "/bin/true",
        ],
        capture_output=True,
        check=False,
    )
    assert started.returncode == 0, started.stderr
    assert (standby / WORK_DIR).stat().st_uid == b.uid  # its own directory: prepared
    assert {path.stat().st_uid for path in checkpoints.rglob("*")} == {a.uid}  # untouched
    assert run_as(a, "echo 1 > offsets/1", checkpoints) == 0  # the active worker writes on

    assert main(["take-checkpoints", "etl"], config_path=config) == 0  # the promotion
    assert {path.stat().st_uid for path in checkpoints.rglob("*")} == {b.uid}
    assert run_as(b, "cat offsets/1 && echo 2 > offsets/2 && rm offsets/0", checkpoints) == 0

    os.chown(standby / WORK_DIR, 0, 0)  # a work directory no allowed user owns
    assert main(["take-checkpoints", "etl"], config_path=config) == REFUSED_EXIT
    assert "not in allowed.users" in capsys.readouterr().err

    direct = base / "s3" / "workers" / "etl"
    prepare_worker(direct, b"{}", a, group=0, checkpoint_dir=None)  # a root supervisor's
    DirectSwitch(group=0).take_checkpoints("etl", direct / WORK_DIR, checkpoints)
    assert {path.stat().st_uid for path in checkpoints.rglob("*")} == {a.uid}
