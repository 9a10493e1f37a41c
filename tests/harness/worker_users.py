"""Operating-system users for the tests of workers that run as other users (root only).

    with os_users(2) as (a, b):        # two fresh users, their processes killed and
        ...                            # the users deleted when the block ends
    base = traversable_dir()           # a directory under /tmp that other users may enter
    python = worker_python(base)       # an interpreter with stratus that they may run
    with os_group([a, b]) as gid:      # a group of them, deleted afterwards
        share_with_group(base / "data", gid)  # what one of them creates there, all may use

pytest's own temporary directory (``/tmp/pytest-of-root``) is 0700: a worker of another user
cannot pass through it, so the supervisor's local directory, the code and the checkpoints
of these tests live under ``traversable_dir()`` instead. The same goes for the interpreter:
one installed under ``/root`` (pyenv) cannot be run by other users, so ``worker_python``
makes a virtual environment of the system's Python of the same version that sees this
one's packages; without such a Python the test is skipped, saying why.
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import secrets
import shutil
import site
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from stratus.supervisor.worker_access import group_default_acl, kill_user_processes

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("useradd") is None,
    reason="creates operating-system users (useradd) and runs workers as them: needs root",
)


@contextlib.contextmanager
def os_users(count: int) -> Iterator[list[str]]:
    """``count`` new users, each with a home and a group of its own; deleted afterwards."""
    tag = secrets.token_hex(3)
    names = [f"stw{tag}{chr(ord('a') + n)}" for n in range(count)]
    made: list[str] = []
    try:
        for name in names:
            subprocess.run(
                ["useradd", "--create-home", "--user-group", "--shell", "/bin/sh", name],
                check=True,
                capture_output=True,
            )
            made.append(name)
        yield names
    finally:
        for name in made:
            with contextlib.suppress(KeyError):
                kill_user_processes(pwd.getpwnam(name).pw_uid)
            subprocess.run(["userdel", "--remove", name], check=False, capture_output=True)


@contextlib.contextmanager
def os_group(members: Sequence[str]) -> Iterator[int]:
    """A new group of ``members`` (users of ``os_users``); its gid. Deleted afterwards."""
    name = f"stg{secrets.token_hex(3)}"
    subprocess.run(["groupadd", name], check=True, capture_output=True)
    try:
        for member in members:
            subprocess.run(["usermod", "-a", "-G", name, member], check=True, capture_output=True)
        yield grp.getgrnam(name).gr_gid
    finally:
        subprocess.run(["groupdel", name], check=False, capture_output=True)


def share_with_group(path: Path, gid: int) -> None:
    """Make ``path`` a directory where what each member of group ``gid`` creates, every
    member may read, write and delete (2771 and a default ACL for the group, which survives
    Spark setting the mode of each directory it creates): the data of pipelines whose
    workers run as different users, one after another. Others may pass through it (a
    supervisor checks that every worker user reaches a checkpoint root below it), not list
    it."""
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, 0, gid)
    path.chmod(0o2771)
    os.setxattr(path, "system.posix_acl_default", group_default_acl(gid))


@contextlib.contextmanager
def traversable_dir() -> Iterator[Path]:
    """A new directory under /tmp that every user may enter (0755); removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="stratus-walls-", dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def worker_python(base: Path) -> str:
    """An interpreter other users can run, with this one's packages (stratus, pyspark)."""
    if _reachable_by_others(Path(sys.executable).resolve()):
        return sys.executable
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    system = Path("/usr/bin") / version
    if not system.exists() or not _reachable_by_others(system.resolve()):
        pytest.skip(
            f"the interpreter {sys.executable} cannot be run by other users, and there is no "
            f"{system} to build one that can"
        )
    venv = base / "worker-venv"
    subprocess.run([str(system), "-m", "venv", "--without-pip", str(venv)], check=True)
    packages = venv / "lib" / version / "site-packages"
    ours = [path for path in site.getsitepackages() if Path(path).is_dir()]
    lines = [f"import site; site.addsitedir({path!r})" for path in ours]
    (packages / "stratus-tests.pth").write_text("\n".join(lines) + "\n")
    return str(venv / "bin" / "python")


def _reachable_by_others(path: Path) -> bool:
    """Whether every directory above ``path`` may be passed by others, and ``path`` run."""
    for parent in path.parents:
        if not parent.stat().st_mode & stat.S_IXOTH:
            return False
    return bool(path.stat().st_mode & stat.S_IXOTH)


@dataclass(frozen=True)
class WalledHosts:
    """Users for the supervisors of several hosts that share one user database."""

    users: dict[str, list[str]]  # host -> its supervisor's pool, no user in two
    group: int  # every worker user is a member: what ``share_with_group`` grants
    python: str  # an interpreter they may run, with stratus

    def uids(self, host: str | None = None) -> set[int]:
        """The uids of ``host``'s workers (None: of every host's)."""
        names = self.users[host] if host else [n for users in self.users.values() for n in users]
        return {pwd.getpwnam(name).pw_uid for name in names}


@contextlib.contextmanager
def walled_hosts(names: Sequence[str], base: Path, *, slots: int = 2) -> Iterator[WalledHosts]:
    """``slots`` new users for each host of ``names`` (a pool kills every process of a user
    when its worker exits: hosts never share one), a group of them all, and an interpreter
    under ``base`` they may run; users and group deleted afterwards."""
    with os_users(len(names) * slots) as made, os_group(made) as gid:
        users = {name: made[n * slots : (n + 1) * slots] for n, name in enumerate(names)}
        yield WalledHosts(users, gid, worker_python(base))


def keep_files(base: Path, directory: Path, patterns: Sequence[str] = ("*.log",)) -> None:
    """Copy the files under ``base`` (a ``traversable_dir``, removed after the test) that
    match ``patterns`` (the daemons' and workers' logs) to ``directory``, which pytest keeps."""
    for pattern in patterns:
        for path in base.rglob(pattern):
            target = directory / path.relative_to(base)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
