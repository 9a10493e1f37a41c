"""Files and directories private to their owner (0600 and 0700), whatever the umask.

Secrets, checkpoints, packages and unpacked code hold what only stratus's user may read; a
umask of 022 would make them readable by every user of the host. ``mkdir`` and ``open``
take a mode that the umask still narrows but never widens back, so the mode is set again
after each creation. Parents that stratus creates are private too; parents that existed
are the operator's and keep their mode::

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
    ``path`` itself is set to 0700 if it existed, unless it is shared with its group on
    purpose (setgid: how a supervisor hands a worker of another user its checkpoints, which
    the daemons' group must still reach). Parents that existed are left alone."""
    missing: list[Path] = []
    level = path
    while not level.exists() and level != level.parent:
        missing.append(level)
        level = level.parent
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):  # made meanwhile by another process
            directory.mkdir(mode=PRIVATE_DIR_MODE)
            os.chmod(directory, PRIVATE_DIR_MODE)  # mkdir's mode went through the umask
    if not path.is_dir():
        raise NotADirectoryError(f"{path} exists and is not a directory")
    if not path.stat().st_mode & stat.S_ISGID:
        os.chmod(path, PRIVATE_DIR_MODE)
    return path


def make_private_file(path: Path) -> None:
    """Set the file ``path`` to 0600 (a file that a library or a copy created)."""
    os.chmod(path, PRIVATE_FILE_MODE)
