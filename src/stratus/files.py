"""Files that hold secrets: created private to their owner, whatever the umask."""

from __future__ import annotations

import os
from pathlib import Path

PRIVATE_FILE_MODE = 0o600


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
