"""What a ZooKeeper server of stratus's refuses before it writes a file: a value that would
not stay one value of ``zoo.cfg`` (a line break would add a line of the caller's choosing),
a host that is not a host, and a data directory that holds another program's files::

    check_cfg_value("host", host, HOST_VALUE)      # ZooKeeperOptionError
    check_data_dir(Path("/etc"), ("zoo.cfg",))     # ZooKeeperDataDirError: it holds other files
"""

from __future__ import annotations

import re
from pathlib import Path

from stratus.zk.errors import ZooKeeperDataDirError, ZooKeeperOptionError

# A host as ZooKeeper reads it: a name, an IPv4 or an IPv6 address (a zone id too).
HOST_VALUE = re.compile(r"[A-Za-z0-9._:%\-]+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_cfg_value(what: str, value: str, rule: re.Pattern[str] | None = None) -> None:
    """Refuse a value that would not stay one value of ``zoo.cfg``: a line break or another
    control character would add a line of the caller's choosing (``enforce.auth.enabled``)."""
    control = _CONTROL.search(value)
    if control is not None:
        raise ZooKeeperOptionError(
            f"the ZooKeeper {what} {value!r} holds a control character "
            f"(U+{ord(control.group()):04X}); zoo.cfg cannot hold it"
        )
    if rule is not None and not rule.fullmatch(value):
        raise ZooKeeperOptionError(
            f"the ZooKeeper {what} {value!r} is not a host name or an IP address"
        )


def check_data_dir(directory: Path, markers: tuple[str, ...]) -> None:
    """Refuse a data directory that holds files but none whose name starts with one of
    ``markers``: it belongs to
    something else (``--data-dir /etc``), and ZooKeeper would write its files among them."""
    try:
        entries = sorted(entry.name for entry in directory.iterdir())
    except FileNotFoundError:
        return
    except NotADirectoryError:
        return  # the creation says so, with its own error
    except OSError as exc:
        raise ZooKeeperDataDirError(
            f"cannot use ZooKeeper data directory {directory}: {exc.strerror or exc}"
        ) from None
    if entries and not any(entry.startswith(markers) for entry in entries):
        shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
        raise ZooKeeperDataDirError(
            f"cannot use ZooKeeper data directory {directory}: it holds other files "
            f"({shown}) and no ZooKeeper data; choose an empty or new directory, or the data "
            "directory of an earlier ZooKeeper"
        )
