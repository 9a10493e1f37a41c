"""Whether ZooKeeper's history went back behind what a client has seen.

ZooKeeper numbers every change with a zxid, and a client remembers the last it saw. A server
whose last zxid is smaller (its data directory wiped, or restored from an older backup)
refuses that client's session, so the client cannot read a past it has already seen. Kazoo
only retries, forever; the session asks every server its ``Zxid`` (the ``srvr`` four-letter
word, whitelisted by default) and gives up with a clear error when all that answer are behind.
With TLS it asks on the same secure ports, over TLS with the session's own settings, so a
server that listens on TLS alone is checked as well::

    error = history_behind_error("zk1:2181,zk2:2181/chroot", client.last_zxid)
    error = history_behind_error("zk1:2281,zk2:2281", client.last_zxid, ZkTls(True, "ca.pem"))
    if error is not None:
        raise error

A check that cannot run (no server answers, the word is not whitelisted, the TLS files cannot
be read) finds nothing behind: it never stops a client that may yet connect.
"""

from __future__ import annotations

import logging
import re
import ssl

from kazoo.hosts import collect_hosts

from stratus.zk.errors import ZooKeeperHistoryBehindError
from stratus.zk.fourletter import four_letter_word
from stratus.zk.tls import ZkTls

log = logging.getLogger(__name__)

PROBE_TIMEOUT_SECS = 1.0
_ZXID = re.compile(r"^Zxid: (0x[0-9a-fA-F]+)", re.MULTILINE)


def server_zxid(
    host: str,
    port: int,
    timeout: float = PROBE_TIMEOUT_SECS,
    tls: ssl.SSLContext | None = None,
) -> int | None:
    """The last zxid of the server at ``host:port`` (asked over ``tls`` if given), or None if
    it does not say."""
    try:
        answer = four_letter_word(host, port, "srvr", timeout, tls)
    except OSError:
        return None
    match = _ZXID.search(answer)
    return int(match[1], 16) if match else None


def history_behind_error(
    hosts: str, seen_zxid: int, tls: ZkTls | None = None
) -> ZooKeeperHistoryBehindError | None:
    """The error to raise if every server of ``hosts`` that answers is behind ``seen_zxid``;
    ``tls``: how the session connects to them, and so how they are asked.

    None while any server is not behind, or none answers (a server that is down is not a
    server that forgot: the client keeps retrying).
    """
    if seen_zxid <= 0:
        return None
    try:
        context = tls.ssl_context() if tls is not None else None
    except (OSError, ValueError) as exc:  # the session itself cannot connect either
        log.warning("event=zookeeper_history_check_skipped reason=%r", str(exc))
        return None
    servers, _chroot = collect_hosts(hosts)
    answers = {f"{host}:{port}": server_zxid(host, port, tls=context) for host, port in servers}
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
