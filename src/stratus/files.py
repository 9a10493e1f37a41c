"""Files and directories private to their owner (0600 and 0700), whatever the umask.

Secrets, checkpoints, packages and unpacked code hold what only stratus's user may read; a
umask of 022 would make them readable by every user of the host. ``mkdir`` and ``open``
take a mode that the umask still narrows but never widens back, so the mode is set again
after each creation. Parents that stratus creates are private too; parents that existed
are the operator's and keep their mode. A directory shared with its group on purpose (the
setgid bit: how a supervisor hands a worker of another user its checkpoints, which the
daemons' group must still reach to purge them) stays shared, and what is made below it is
shared with that group alike (2770 and 0660), never with others::

    write_private(Path("/etc/stratus/token"), token)     # a new 0600 file, never reopened
    private_dirs(Path("/var/lib/stratus/packages"))      # every missing level 0700
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, PRIVATE_FILE_MODE)
    os.fchmod(fd, PRIVATE_FILE_MODE)                    # an existing file too
    make_private_file(path)                              # a file made by another call
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

PRIVATE_FILE_MODE = 0o600
PRIVATE_DIR_MODE = 0o700
GROUP_DIR_MODE = 0o2770  # below a directory shared with its group on purpose
GROUP_FILE_MODE = 0o660


def write_private(path: Path, text: str) -> Path:
    """``text`` into a new file at ``path`` that only its owner may read or write.

    An existing file is replaced, never opened: its mode, owner or a link in its place would
    otherwise decide who reads the secret.
    """
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, PRIVATE_FILE_MODE)
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        file.write(text)
    return path


def private_dirs(path: Path) -> Path:
    """``path`` as a directory of mode 0700, made with every missing parent, each 0700;
    ``path`` itself is set to 0700 if it existed. Below a directory shared with its group on
    purpose (setgid) every level is 2770 instead, and that directory keeps its mode.
    Parents that existed are left alone."""
    missing: list[Path] = []
    level = path
    while not level.exists() and level != level.parent:
        missing.append(level)
        level = level.parent
    for directory in reversed(missing):
        mode = _dir_mode(directory.parent)
        with contextlib.suppress(FileExistsError):  # made meanwhile by another process
            directory.mkdir(mode=mode & 0o777)
            os.chmod(directory, mode)  # mkdir's mode went through the umask
    if not path.is_dir():
        raise NotADirectoryError(f"{path} exists and is not a directory")
    if not _shared(path):
        os.chmod(path, _dir_mode(path.parent))
    return path


def make_private_file(path: Path) -> None:
    """Set the file ``path`` to 0600 (a file that a library or a copy created); 0660 in a
    directory shared with its group on purpose."""
    os.chmod(path, GROUP_FILE_MODE if _shared(path.parent) else PRIVATE_FILE_MODE)


def _shared(directory: Path) -> bool:
    """Whether ``directory`` is shared with its group on purpose (its setgid bit)."""
    try:
        return bool(directory.stat().st_mode & stat.S_ISGID)
    except OSError:
        return False


def _dir_mode(parent: Path) -> int:
    return GROUP_DIR_MODE if _shared(parent) else PRIVATE_DIR_MODE


def write_atomically(path: Path, data: bytes, *, mode: int = PRIVATE_FILE_MODE) -> None:
    """Replace ``path`` with ``data`` at once, as a file only its owner reads (0600, unless
    ``mode`` says otherwise): a spec holds the pipeline's conf, secrets included."""
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
    try:
        os.fchmod(fd, mode)  # a leftover temp file keeps its mode otherwise
        _write_all(fd, data)
    finally:
        os.close(fd)
    os.replace(temp, path)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
