"""Operating-system users for the tests of workers that run as other users (root only).

    with os_users(2) as (a, b):        # two fresh users, their processes killed and
        ...                            # the users deleted when the block ends
    base = traversable_dir()           # a directory under /tmp that other users may enter
    python = worker_python(base)       # an interpreter with stratus that they may run

pytest's own temporary directory (``/tmp/pytest-of-root``) is 0700: a worker of another user
cannot pass through it, so the supervisor's local directory, the code and the checkpoints
of these tests live under ``traversable_dir()`` instead. The same goes for the interpreter:
one installed under ``/root`` (pyenv) cannot be run by other users, so ``worker_python``
makes a virtual environment of the system's Python of the same version that sees this
one's packages; without such a Python the test is skipped, saying why.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import site
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from stratus.supervisor.worker_access import kill_user_processes

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
