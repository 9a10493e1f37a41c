"""``stratus-worker-launcher``: the privileged step of a supervisor that is not root.

A supervisor that runs as its own user (``stratus``) cannot start a process as another user,
signal it, or give it its files. It runs this program through ``sudo -n`` (the sudoers line
of ``deploy/stratus-worker-launcher.sudoers``), and the program does only that, after
checking every request against its own configuration, ``/etc/stratus/worker-launcher.cfg``
(``CONFIG_PATH``; no option names another), which must be root's and writable by root
alone::

    supervisor.user: stratus                          # the only caller (sudo's SUDO_UID)
    supervisor.local.dir: /var/lib/stratus/supervisor # the workers' directories are below
    pipeline.checkpoint.root: /srv/stratus/checkpoints  # optional: a local root to hand out
    allowed.users: [stratus-w1, stratus-w2, stratus-w3, stratus-w4]
    banned.users: [stratus]                           # root is always banned
    min.uid: 1000

Commands (exit 0: done, 2: a usage error, 3: refused; the reason on stderr)::

    stratus-worker-launcher launch PIPELINE USER -- ARGV...   # prepare, then exec as USER
    stratus-worker-launcher launch-standby PIPELINE USER -- ARGV...  # the same, checkpoints kept
    stratus-worker-launcher take-checkpoints PIPELINE         # to the user of its worker dir
    stratus-worker-launcher signal USER PID SIGNAL [--all]    # TERM, INT, CONT or KILL
    stratus-worker-launcher kill-user USER                    # every process of USER
    stratus-worker-launcher purge PIPELINE ROOT               # delete <root>/PIPELINE

``launch`` prepares the worker's files (``worker_access.prepare_worker``: its copy of
``<local>/workers/PIPELINE/spec.json``, its directory, its checkpoint directory), takes its
environment from ``env.json`` beside the spec (the supervisor's, never a command line),
drops to USER (setgroups, setgid, setuid: no capability is left, and ``no_new_privs`` is
set so that nothing it runs gains one), and execs ARGV. ``signal`` reaches only processes
that run as USER and descend from PID (the process the supervisor started: sudo, or the
worker itself) or are in its process group (without ``--all``, only the first of them:
the worker, not its children). Only users of ``allowed.users`` are ever accepted, never root
nor a uid below ``min.uid``. ``purge`` deletes a pipeline's checkpoints
(``<pipeline.checkpoint.root>/PIPELINE`` of its own configuration, which ROOT must name:
the caller never chooses where) when the supervisor's own rights did not reach every file a
worker user wrote there; only that directory, resolved and checked to be inside the root.
``launch-standby`` is ``launch`` without the checkpoint directory: a standby worker's start
leaves it to the active worker, whose user runs on elsewhere; ``take-checkpoints`` gives it,
at the standby worker's promotion, to the user that owns ``<local>/workers/PIPELINE/work``
(the one ``launch-standby`` prepared it for), never to a user the caller names.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import pwd
import signal
import stat
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from stratus.api.names import check_pipeline_name
from stratus.checkpoints import remove_checkpoints
from stratus.errors import StratusError
from stratus.process import live_in_group
from stratus.supervisor.errors import WorkerUserError
from stratus.supervisor.worker_access import (
    ENV_FILE,
    WORK_DIR,
    WORKER_UMASK,
    WorkerUser,
    kill_user_processes,
    prepare_worker,
    process_uids,
    resolve_user,
    take_checkpoints,
    worker_identity,
)
from stratus.worker.spec import SPEC_FILE, WorkerSpec

CONFIG_PATH = Path("/etc/stratus/worker-launcher.cfg")
SIGNALS = {
    "TERM": signal.SIGTERM,
    "INT": signal.SIGINT,
    "CONT": signal.SIGCONT,
    "KILL": signal.SIGKILL,
}
USAGE_EXIT = 2
REFUSED_EXIT = 3
MAX_FILE_BYTES = 16 << 20
_PR_SET_NO_NEW_PRIVS = 38


@dataclass(frozen=True)
class LauncherConfig:
    """The launcher's own configuration (see the module docstring)."""

    supervisor_user: str
    local_dir: Path
    allowed_users: frozenset[str]
    banned_users: frozenset[str]
    min_uid: int
    checkpoint_root: Path | None = None

    @classmethod
    def load(cls, path: Path) -> LauncherConfig:
        """Read and check ``path``; WorkerUserError naming what is wrong."""
        _check_root_owned(path)
        try:
            raw = yaml.safe_load(path.read_text()) or {}
            root = raw.get("pipeline.checkpoint.root")
            config = cls(
                supervisor_user=str(raw["supervisor.user"]),
                local_dir=Path(str(raw["supervisor.local.dir"])),
                allowed_users=frozenset(str(name) for name in raw.get("allowed.users", [])),
                banned_users=frozenset(str(name) for name in raw.get("banned.users", [])),
                min_uid=int(raw.get("min.uid", 1000)),
                checkpoint_root=Path(str(root)) if root else None,
            )
        except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError, AttributeError) as exc:
            raise WorkerUserError(
                f"cannot use the launcher's configuration {path}: {exc!r}"
            ) from None
        if config.min_uid < 1:
            raise WorkerUserError(f"{path}: min.uid must be 1 at least")
        return config


def main(argv: Sequence[str] | None = None, *, config_path: Path = CONFIG_PATH) -> int:
    """The program; see the module docstring. Returns only when it does not exec."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        return _dispatch(args, config_path)
    except _UsageError as exc:
        print(f"stratus-worker-launcher: {exc}\n{_USAGE}", file=sys.stderr)
        return USAGE_EXIT
    except (StratusError, OSError, ValueError) as exc:  # ValueError: a spec or env that is not
        print(f"stratus-worker-launcher: refused: {exc}", file=sys.stderr)
        return REFUSED_EXIT


class _UsageError(Exception):
    pass


_USAGE = (
    "usage: stratus-worker-launcher launch|launch-standby PIPELINE USER -- ARGV... | "
    "take-checkpoints PIPELINE | signal USER PID SIGNAL [--all] | kill-user USER | "
    "purge PIPELINE ROOT"
)


def _dispatch(args: list[str], config_path: Path) -> int:
    if not args:
        raise _UsageError("no command")
    command, rest = args[0], args[1:]
    if os.geteuid() != 0:
        raise WorkerUserError("it must run as root (through sudo -n)")
    config = LauncherConfig.load(config_path)
    supervisor = _check_caller(config)
    if command in ("launch", "launch-standby"):
        if len(rest) < 4 or rest[2] != "--":
            raise _UsageError(f"{command} needs PIPELINE USER -- ARGV...")
        checkpoints = command == "launch"
        return _launch(config, supervisor, rest[0], rest[1], rest[3:], checkpoints=checkpoints)
    if command == "take-checkpoints":
        if len(rest) != 1:
            raise _UsageError("take-checkpoints needs PIPELINE")
        return _take_checkpoints(config, supervisor, rest[0])
    if command == "signal":
        whole = rest[3:] == ["--all"]
        if len(rest) not in (3, 4) or (len(rest) == 4 and not whole):
            raise _UsageError("signal needs USER PID SIGNAL [--all]")
        user = _allowed_user(config, supervisor, rest[0])
        return _signal(user, _number(rest[1]), rest[2], whole_group=whole)
    if command == "kill-user" and len(rest) == 1:
        kill_user_processes(_allowed_user(config, supervisor, rest[0]).uid)
        return 0
    if command == "purge":
        if len(rest) != 2:
            raise _UsageError("purge needs PIPELINE ROOT")
        return _purge(config, rest[0], rest[1])
    raise _UsageError(f"unknown command {' '.join(args[:1])!r}")


def _check_caller(config: LauncherConfig) -> pwd.struct_passwd:
    """The supervisor's account; refused unless sudo's caller (or root itself) is it."""
    try:
        supervisor = pwd.getpwnam(config.supervisor_user)
    except KeyError:
        raise WorkerUserError(
            f"supervisor.user {config.supervisor_user!r} does not exist"
        ) from None
    caller = os.environ.get("SUDO_UID")
    if caller is not None and caller != str(supervisor.pw_uid):
        raise WorkerUserError(f"uid {caller} is not the supervisor's ({config.supervisor_user})")
    return supervisor


def _allowed_user(config: LauncherConfig, supervisor: pwd.struct_passwd, name: str) -> WorkerUser:
    if name not in config.allowed_users:
        raise WorkerUserError(f"user {name!r} is not in allowed.users")
    banned = config.banned_users | {config.supervisor_user}
    return resolve_user(name, min_uid=config.min_uid, banned=banned, group=supervisor.pw_gid)


def _launch(
    config: LauncherConfig,
    supervisor: pwd.struct_passwd,
    pipeline: str,
    name: str,
    argv: list[str],
    *,
    checkpoints: bool = True,
) -> int:
    user = _allowed_user(config, supervisor, name)
    check_pipeline_name(pipeline)
    directory = config.local_dir / "workers" / pipeline
    info = os.lstat(directory)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != supervisor.pw_uid:
        raise WorkerUserError(f"{directory} is not a directory of {config.supervisor_user}")
    spec = _read_private(directory / SPEC_FILE, supervisor.pw_uid)
    if WorkerSpec.model_validate_json(spec).pipeline != pipeline:
        raise WorkerUserError(f"{directory / SPEC_FILE} is not the spec of {pipeline}")
    env = json.loads(_read_private(directory / ENV_FILE, supervisor.pw_uid))
    if not isinstance(env, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in env.items()
    ):
        raise WorkerUserError(f"{directory / ENV_FILE} is not an environment")
    env.update(worker_identity(user, directory))
    own = config.checkpoint_root / pipeline if config.checkpoint_root and checkpoints else None
    prepare_worker(
        directory,
        spec,
        user,
        group=supervisor.pw_gid,
        checkpoint_dir=own,
        owner=supervisor.pw_uid,
    )
    _become(user)
    os.chdir(directory / WORK_DIR)
    os.execvpe(argv[0], argv, env)


def _take_checkpoints(config: LauncherConfig, supervisor: pwd.struct_passwd, pipeline: str) -> int:
    """Give ``<checkpoint_root>/<pipeline>`` of the configuration to the allowed user that
    owns the pipeline's worker directory (a standby worker's, at its promotion)."""
    check_pipeline_name(pipeline)
    if config.checkpoint_root is None:
        return 0  # no local root: the checkpoints are not this host's to hand over
    directory = config.local_dir / "workers" / pipeline
    info = os.lstat(directory)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != supervisor.pw_uid:
        raise WorkerUserError(f"{directory} is not a directory of {config.supervisor_user}")
    work = os.lstat(directory / WORK_DIR)
    if not stat.S_ISDIR(work.st_mode):
        raise WorkerUserError(f"{directory / WORK_DIR} is not a worker's directory")
    try:
        name = pwd.getpwuid(work.st_uid).pw_name
    except KeyError:
        raise WorkerUserError(
            f"{directory / WORK_DIR} belongs to no user (uid {work.st_uid})"
        ) from None
    _allowed_user(config, supervisor, name)  # never root, the supervisor or a stranger
    checkpoints = config.checkpoint_root / pipeline
    take_checkpoints(directory / WORK_DIR, checkpoints, group=supervisor.pw_gid)
    return 0


def _purge(config: LauncherConfig, pipeline: str, root: str) -> int:
    """Delete ``<checkpoint_root>/<pipeline>`` of the configuration, which ``root`` names."""
    check_pipeline_name(pipeline)
    own = config.checkpoint_root
    if own is None:
        raise WorkerUserError(
            "no pipeline.checkpoint.root in the launcher's configuration: it purges nothing"
        )
    if Path(root) != own:
        raise WorkerUserError(
            f"{root} is not the launcher's pipeline.checkpoint.root ({own}): nothing deleted"
        )
    remove_checkpoints(str(own), pipeline)
    return 0


def _become(user: WorkerUser) -> None:
    """Drop every privilege for ``user``'s, for good."""
    os.setgroups(user.groups())
    os.setresgid(user.gid, user.gid, user.gid)
    os.setresuid(user.uid, user.uid, user.uid)
    if os.getresuid() != (user.uid,) * 3 or 0 in os.getresgid():
        raise WorkerUserError(f"could not become {user.name}")
    os.umask(WORKER_UMASK)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise WorkerUserError("could not set no_new_privs")


def _signal(user: WorkerUser, leader: int, name: str, *, whole_group: bool) -> int:
    signum = SIGNALS.get(name.upper().removeprefix("SIG"))
    if signum is None:
        raise _UsageError(f"signal {name!r} is not one of {', '.join(SIGNALS)}")
    if leader <= 1:
        raise _UsageError(f"process {leader} cannot be a worker's")
    parents = _parents()
    # the process the supervisor started (sudo, or the worker itself), what descends from
    # it and its process group: whether sudo gives the command a group of its own or not
    family = set(live_in_group(leader)) | _descendants(leader, parents)
    own = (user.uid, user.uid)
    members = [pid for pid in family if process_uids(pid) == own]
    if not whole_group:  # the worker alone: the first process of the user in the chain
        members = [pid for pid in members if process_uids(parents.get(pid, 0)) != own]
    for pid in members:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)
    return 0


def _parents() -> dict[int, int]:
    """Every live process's parent (Linux: /proc)."""
    found = {}
    for entry in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            found[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
    return found


def _descendants(pid: int, parents: dict[int, int]) -> set[int]:
    """``pid`` and every live process below it."""
    children: dict[int, list[int]] = {}
    for child, parent in parents.items():
        children.setdefault(parent, []).append(child)
    found, todo = set(), [pid]
    while todo:
        current = todo.pop()
        if current in parents and current not in found:
            found.add(current)
            todo.extend(children.get(current, []))
    return found


def _read_private(path: Path, owner: int) -> bytes:
    """``path``'s bytes, if it is a regular file of ``owner`` that nobody else may write."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != owner or info.st_mode & 0o022:
            raise WorkerUserError(f"{path} is not a private file of the supervisor")
        return os.read(fd, MAX_FILE_BYTES)
    finally:
        os.close(fd)


def _check_root_owned(path: Path) -> None:
    """Refuse a configuration that anyone but root could have written."""
    for item in (path, path.parent):
        info = os.lstat(item)
        if info.st_uid != 0 or info.st_mode & 0o022 or stat.S_ISLNK(info.st_mode):
            raise WorkerUserError(
                f"{item} must be owned by root and writable by root alone (chown root; "
                "chmod go-w): it decides who workers may run as"
            )


def _number(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise _UsageError(f"{text!r} is not a process id") from None


if __name__ == "__main__":
    sys.exit(main())
