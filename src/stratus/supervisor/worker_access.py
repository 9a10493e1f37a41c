"""Who a worker runs as, and who may touch its files: the one place that decides owners and modes.

A worker runs a pipeline's code. With ``supervisor.worker.run.as`` `pool` or `shared` it runs
as an operating-system user of ``supervisor.worker.users``, not as its supervisor, so that the
code cannot read the daemons' credentials, their environment (``/proc/<pid>/environ``) or
their keys, nor (`pool`: one user per running pipeline) another pipeline's spec, log or
checkpoints. Every owner and mode of a worker's files is set here, by ``prepare_worker``,
which the supervisor runs itself when it is root and the worker launcher
(``stratus.supervisor.worker_launcher``, through sudo) runs otherwise::

    user = resolve_user("stratus-w1", min_uid=1000)      # WorkerUserError if refused
    prepare_worker(WorkerPaths(...).directory, spec_bytes, user, group=os.getgid(),
                   checkpoint_dir=Path("/srv/stratus/checkpoints/etl"))
    worker_identity(user, directory)                     # HOME, USER, TMPDIR, ...

The files of one pipeline's worker, ``W = <supervisor.local.dir>/workers/<pipeline>``:

==========================  ===========================  =====  ===========================
path                        owner, group                 mode   written / read by
==========================  ===========================  =====  ===========================
``<local>``, ``<local>/workers``  supervisor             0711   entered by workers, not listed
``W``                       supervisor                   0711   (0700: workers run as it)
``W/spec.json``             supervisor                   0600   the supervisor's own copy
``W/runs``, ``W/runs/<n>``  supervisor                   0700   each run's log (``run_logs``)
``W/runs/<n>/worker.log*``  supervisor                   0600   the supervisor's log pump
``W/run.json``              supervisor                   0600   which run the worker is
``W/env.json``              supervisor                   0600   the launcher (sudo) reads it
``W/work``                  worker, supervisor's group   2770   the worker's own directory
``W/work/spec.json``        worker                       0600   the worker's copy
``W/work/heartbeat.json``   worker, supervisor's group   0640   the worker, its supervisor
``W/work/tmp``              worker                       0700   ``TMPDIR``, Spark's scratch
``W/work/promote.json``     worker (root supervisor)     0600   a standby worker's promotion
                            supervisor (else)            0604   (``hand_to_worker``)
``<local>/lease``           supervisor                   0644   every worker (a time only)
``<root>/<pipeline>``       worker, supervisor's group   2770   checkpoints; a default ACL
                                                                lets the daemons' group
                                                                delete them (a purge)
==========================  ===========================  =====  ===========================

The worker runs with umask 007: what it creates is its own and its supervisor's group's,
never another user's. Worker users must not be members of the supervisor's group.
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import secrets
import signal
import stat
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from stratus.files import PRIVATE_DIR_MODE, PRIVATE_FILE_MODE, write_atomically
from stratus.supervisor.errors import WorkerUserError
from stratus.worker.spec import HEARTBEAT_FILE, SPEC_FILE

WORK_DIR = "work"
ENV_FILE = "env.json"  # the worker's environment, for the launcher: 0600, the supervisor's
TMP_DIR = "tmp"
TRAVERSE_DIR_MODE = 0o711  # a worker of another user may pass through, not list
# its group, the supervisor's, reads the heartbeat and removes the last run's before a start;
# what the worker creates in it inherits the group
WORKER_DIR_MODE = 0o2770
WORKER_TMP_MODE = 0o700
CHECKPOINT_DIR_MODE = 0o2770  # the daemons' group may delete what the worker wrote (a purge)
# a file a supervisor that is not root hands a worker of another user in its ``work``: the
# worker's user reads it as one of the others, the only other who enters ``work`` (2770); the
# supervisor's group, which may enter it, reads nothing
HANDED_FILE_MODE = 0o604
WORKER_UMASK = 0o007
ALWAYS_BANNED = frozenset({"root"})


@dataclass(frozen=True)
class WorkerUser:
    """An operating-system user that workers may run as."""

    name: str
    uid: int
    gid: int
    home: str

    def groups(self) -> list[int]:
        """Its supplementary groups, as ``initgroups`` would set them."""
        return os.getgrouplist(self.name, self.gid)


def resolve_user(
    name: str, *, min_uid: int, banned: frozenset[str] = ALWAYS_BANNED, group: int | None = None
) -> WorkerUser:
    """The user ``name``, if workers may run as it: it exists, is not banned (root never is
    allowed), its uid is ``min_uid`` at least, and (``group``) it is not a member of the
    supervisor's group. WorkerUserError naming the rule otherwise."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise WorkerUserError(
            f"worker user {name!r} does not exist on this host: create it (useradd) or "
            "remove it from supervisor.worker.users"
        ) from None
    if name in banned | ALWAYS_BANNED or entry.pw_uid == 0:
        raise WorkerUserError(f"worker user {name!r} is banned: workers never run as it")
    if entry.pw_uid < min_uid:
        raise WorkerUserError(
            f"worker user {name!r} has uid {entry.pw_uid}, below the minimum {min_uid} "
            "(supervisor.worker.min.uid): system accounts cannot run workers"
        )
    user = WorkerUser(name, entry.pw_uid, entry.pw_gid, entry.pw_dir)
    if group is not None and group in user.groups():
        raise WorkerUserError(
            f"worker user {name!r} is a member of the supervisor's group {_group_name(group)}: "
            "it could read what that group may; take it out of the group"
        )
    return user


def worker_identity(user: WorkerUser | None, directory: Path) -> dict[str, str]:
    """The variables of a worker's environment that say who and where it is: its user's
    HOME, USER and LOGNAME, and its private temporary directory (``TMPDIR``, and Spark's
    scratch space ``SPARK_LOCAL_DIRS``); none when it runs as the supervisor."""
    if user is None:
        return {}
    tmp = str(directory / WORK_DIR / TMP_DIR)
    return {
        "HOME": user.home,
        "USER": user.name,
        "LOGNAME": user.name,
        "TMPDIR": tmp,
        "SPARK_LOCAL_DIRS": tmp,
    }


def prepare_worker(
    directory: Path,
    spec: bytes,
    user: WorkerUser | None,
    *,
    group: int,
    checkpoint_dir: Path | None,
    owner: int | None = None,
) -> None:
    """Before a worker starts: its directory ``directory``, the supervisor's, and in it its
    own directory ``work`` with its copy of the ``spec`` and no heartbeat left of the last
    run, its temporary directory, and (``checkpoint_dir``: a local one) its pipeline's
    checkpoint directory; owned by ``user`` and ``group`` (None: by the caller, as before).
    Needs root when ``user`` is set. Nothing is followed through a symbolic link: every
    step below ``directory`` is taken from a descriptor of the directory above it, so a
    directory swapped for a link meanwhile is refused, not followed (WorkerUserError), and
    so is a ``directory`` that ``owner`` (the supervisor's uid, if given) does not own."""
    directory.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR_MODE)
    if user is None:
        _refuse_link(directory)
        directory.chmod(PRIVATE_DIR_MODE)
        work = directory / WORK_DIR
        work.mkdir(exist_ok=True)
        _refuse_link(work)
        work.chmod(WORKER_DIR_MODE)
        (work / HEARTBEAT_FILE).unlink(missing_ok=True)  # a new process starts with none
        write_atomically(work / SPEC_FILE, spec)
        return
    with _opened(directory) as top_fd:
        if owner is not None and os.fstat(top_fd).st_uid != owner:
            raise WorkerUserError(f"{directory} is not the supervisor's directory")
        os.fchmod(top_fd, TRAVERSE_DIR_MODE)
        _own_tree(WORK_DIR, top_fd, user.uid, group, WORKER_DIR_MODE)
        with _opened(WORK_DIR, top_fd) as work_fd:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(HEARTBEAT_FILE, dir_fd=work_fd)  # a new process starts with none
            _write_owned(SPEC_FILE, work_fd, spec, user.uid, group)
            _own_tree(TMP_DIR, work_fd, user.uid, group, WORKER_TMP_MODE)
    if checkpoint_dir is not None:
        _own_checkpoints(checkpoint_dir, user.uid, group)


def take_checkpoints(work: Path, checkpoint_dir: Path, *, group: int) -> None:
    """Give ``checkpoint_dir`` (a pipeline's local checkpoint directory) to the user that
    owns ``work``, the own directory of a standby worker being promoted: its start did not
    take it (``prepare_worker`` without ``checkpoint_dir``), since the active worker, of
    another user on another supervisor, was still writing there. Needs root; ``work`` is
    not followed through a symbolic link (WorkerUserError)."""
    with _opened(work) as work_fd:
        uid = os.fstat(work_fd).st_uid
    if uid == 0:
        raise WorkerUserError(f"{work} is root's: not a worker's own directory")
    _own_checkpoints(checkpoint_dir, uid, group)


def _own_checkpoints(checkpoint_dir: Path, uid: int, group: int) -> None:
    checkpoint_dir.parent.mkdir(parents=True, exist_ok=True)
    with _opened(checkpoint_dir.parent, follow=True) as root_fd:
        _own_tree(checkpoint_dir.name, root_fd, uid, group, CHECKPOINT_DIR_MODE, acl=True)


def hand_to_worker(work: Path, name: str, data: bytes) -> None:
    """Replace ``name`` in ``work``, the own directory of a worker of another user, with
    ``data`` for that worker to read: as the worker's own file (0600, as its copy of the
    spec) when the caller is root, else as the caller's, readable by the worker's user only
    (``HANDED_FILE_MODE``). Neither ``work`` nor the temporary file is followed through a
    symbolic link (WorkerUserError for ``work``)."""
    with _opened(work) as work_fd:
        if os.geteuid() == 0:
            owner = os.fstat(work_fd)  # prepare_worker gave ``work`` to the worker's user
            _write_owned(name, work_fd, data, owner.st_uid, owner.st_gid)
        else:
            _write_owned(name, work_fd, data, None, None, mode=HANDED_FILE_MODE)


def closed_to_others(path: Path) -> Path | None:
    """The first directory on the way to ``path`` (itself included, once resolved) that
    other users may not pass (no ``o+x``), or ``path`` itself if it is a file they may not
    run; None when a worker of another user reaches it. What is missing counts as open."""
    resolved = path.resolve()
    for directory in [*reversed(resolved.parents), resolved]:
        try:
            mode = directory.stat().st_mode
        except FileNotFoundError:
            return None
        if not mode & stat.S_IXOTH:
            return directory
    return None


def kill_user_processes(uid: int) -> list[int]:
    """SIGKILL every process of ``uid`` (its real or effective uid): what a pipeline left
    behind, before its user is given to another pipeline. The pids signalled."""
    if uid == 0:
        raise WorkerUserError("refusing to kill the processes of root")
    killed = []
    for pid in processes_of(uid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
    return killed


def processes_of(uid: int) -> list[int]:
    """The live processes whose real or effective uid is ``uid`` (Linux: /proc)."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        uids = process_uids(int(entry.name))
        if uids is not None and uid in uids:
            found.append(int(entry.name))
    return found


def process_uids(pid: int) -> tuple[int, int] | None:
    """The real and effective uid of process ``pid``; None if it is gone (or a zombie)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    fields: Mapping[str, str] = dict(
        line.split(":", 1) for line in status.splitlines() if ":" in line
    )
    if fields.get("State", "").strip().startswith(("Z", "X")):
        return None
    real, effective = fields["Uid"].split()[:2]
    return int(real), int(effective)


@contextlib.contextmanager
def _opened(path: Path | str, dir_fd: int | None = None, *, follow: bool = False) -> Iterator[int]:
    """A descriptor of the directory ``path`` (relative to ``dir_fd``), closed afterwards;
    WorkerUserError if it is a symbolic link (unless ``follow``) or not a directory."""
    flags = os.O_RDONLY | os.O_DIRECTORY | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags, dir_fd=dir_fd)
    except (NotADirectoryError, OSError) as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise WorkerUserError(f"{path} is not a directory (a link?): {exc.strerror}") from None
    try:
        yield fd
    finally:
        os.close(fd)


def _write_owned(
    name: str,
    dir_fd: int,
    data: bytes,
    uid: int | None,
    gid: int | None,
    *,
    mode: int = PRIVATE_FILE_MODE,
) -> None:
    """Replace ``name`` in the directory ``dir_fd`` (one its worker's user may write) with
    ``data``, as a file of ``uid`` (None: the caller's) with ``mode`` (0600: ``uid`` only).
    The temporary file has a name nobody can guess and is created, never opened if it
    exists: a link planted there is not written through."""
    temp = f".{name}.{secrets.token_hex(8)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    fd = os.open(temp, flags, mode, dir_fd=dir_fd)
    try:
        os.fchmod(fd, mode)  # the umask narrowed it
        if uid is not None and gid is not None:
            os.fchown(fd, uid, gid)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
    os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def _own_tree(name: str, dir_fd: int, uid: int, gid: int, mode: int, *, acl: bool = False) -> None:
    """Create the directory ``name`` in ``dir_fd`` if missing, owned ``uid``:``gid`` with
    ``mode``, and give whatever is below it that another user owns to ``uid``:``gid`` (a
    pipeline whose last run had another user of the pool); symbolic links are neither
    followed nor changed but for their own owner, and a file with several links is left
    alone (it may be another's). ``acl``: every directory also gets a default ACL that
    gives ``gid`` what is created below it (``group_default_acl``)."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, mode & 0o777, dir_fd=dir_fd)
    with _opened(name, dir_fd) as fd:
        os.fchown(fd, uid, gid)
        os.fchmod(fd, mode)
    for _top, dirs, files, top_fd in os.fwalk(name, dir_fd=dir_fd, follow_symlinks=False):
        if acl:
            _set_default_acl(top_fd, gid)
        for entry in [*dirs, *files]:
            info = os.stat(entry, dir_fd=top_fd, follow_symlinks=False)
            if info.st_uid == uid and info.st_gid == gid:
                continue
            if stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
                continue
            os.chown(entry, uid, gid, dir_fd=top_fd, follow_symlinks=False)


# POSIX ACLs as Linux stores them in an extended attribute (linux/posix_acl_xattr.h)
_ACL_VERSION = 2
_ACL_USER_OBJ, _ACL_GROUP_OBJ, _ACL_GROUP, _ACL_MASK, _ACL_OTHER = 0x01, 0x04, 0x08, 0x10, 0x20
_ACL_NO_ID = 0xFFFFFFFF
_DEFAULT_ACL = "system.posix_acl_default"


def group_default_acl(gid: int) -> bytes:
    """A default ACL: what is created below a directory is its owner's and group ``gid``'s
    (rwx, as far as the new entry's own mode allows), never its owning group's nor others'.
    Spark (Hadoop) sets the mode of every directory it creates, which clears the setgid
    bit that would otherwise pass the supervisor's group down: a default ACL survives it."""
    entries = [
        (_ACL_USER_OBJ, 0o7, _ACL_NO_ID),
        (_ACL_GROUP_OBJ, 0, _ACL_NO_ID),
        (_ACL_GROUP, 0o7, gid),
        (_ACL_MASK, 0o7, _ACL_NO_ID),
        (_ACL_OTHER, 0, _ACL_NO_ID),
    ]
    return struct.pack("<I", _ACL_VERSION) + b"".join(
        struct.pack("<HHI", tag, perm, ident) for tag, perm, ident in entries
    )


def _set_default_acl(directory_fd: int, gid: int) -> None:
    """Give the directory open as ``directory_fd`` the group's default ACL; a file system
    without ACLs keeps the setgid bit alone (a purge may then find a directory it cannot
    delete, and leaves it to the operator)."""
    with contextlib.suppress(OSError):
        os.setxattr(directory_fd, _DEFAULT_ACL, group_default_acl(gid))


def _refuse_link(path: Path) -> None:
    if path.is_symlink():
        raise WorkerUserError(f"{path} is a symbolic link: a worker's directory never is")


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)
