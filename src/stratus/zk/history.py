"""Whether ZooKeeper's history went back behind what a client has seen.

ZooKeeper numbers every change with a zxid, and a client remembers the last it saw. A server
whose last zxid is smaller (its data directory wiped, or restored from an older backup)
refuses that client's session, so the client cannot read a past it has already seen. Kazoo
only retries, forever; the session asks every server its ``Zxid`` (the ``srvr`` four-letter
word, whitelisted by default) and gives up with a clear error when all that answer are behind::

    error = history_behind_error("zk1:2181,zk2:2181/chroot", client.last_zxid)
    if error is not None:
        raise error
"""

from __future__ import annotations

import re

from kazoo.hosts import collect_hosts

from stratus.zk.errors import ZooKeeperHistoryBehindError
from stratus.zk.fourletter import four_letter_word

PROBE_TIMEOUT_SECS = 1.0
_ZXID = re.compile(r"^Zxid: (0x[0-9a-fA-F]+)", re.MULTILINE)


def server_zxid(host: str, port: int, timeout: float = PROBE_TIMEOUT_SECS) -> int | None:
    """The last zxid of the server at ``host:port``, or None if it does not say."""
    try:
        answer = four_letter_word(host, port, "srvr", timeout)
    except OSError:
        return None
    match = _ZXID.search(answer)
    return int(match[1], 16) if match else None


def history_behind_error(hosts: str, seen_zxid: int) -> ZooKeeperHistoryBehindError | None:
    """The error to raise if every server of ``hosts`` that answers is behind ``seen_zxid``.

    None while any server is not behind, or none answers (a server that is down is not a
    server that forgot: the client keeps retrying).
    """
    if seen_zxid <= 0:
        return None
    servers, _chroot = collect_hosts(hosts)
    answers = {f"{host}:{port}": server_zxid(host, port) for host, port in servers}
    known = {server: zxid for server, zxid in answers.items() if zxid is not None}
    if not known or any(zxid >= seen_zxid for zxid in known.values()):
        return None
    behind = ", ".join(f"{server} at 0x{zxid:x}" for server, zxid in sorted(known.items()))
    return ZooKeeperHistoryBehindError(
        f"ZooKeeper's history is behind what this process has seen (zxid 0x{seen_zxid:x}; "
        f"{behind}): its data was wiped or restored from an older backup, so it refuses "
        "this session. Restart every stratus daemon so that they start fresh sessions, "
        "after checking that the restored data is what you want (see docs/zookeeper.md)"
    )
