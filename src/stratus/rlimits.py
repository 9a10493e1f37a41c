"""The daemons' open-file limit, raised at start from the soft limit to the hard one.

Every connection, ZooKeeper session, log and package is a file descriptor. Many systems
start a process with a soft limit of 1024 while allowing far more (the hard limit): a
daemon that keeps the soft one runs out under a burst of connections, and then cannot
even reconnect to ZooKeeper. Each daemon calls ``raise_open_files_limit()`` first::

    soft, hard = raise_open_files_limit()   # soft == hard unless the system refused
"""

from __future__ import annotations

import logging
import resource

log = logging.getLogger(__name__)


def raise_open_files_limit() -> tuple[int, int]:
    """Raise ``RLIMIT_NOFILE``'s soft limit to its hard limit; the (soft, hard) in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:  # some systems refuse an infinite soft limit
        target = max(soft, 1024 * 1024)
    if soft == target:
        return soft, hard
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError) as exc:
        log.warning("event=nofile_limit_kept soft=%d hard=%d reason=%s", soft, hard, exc)
        return soft, hard
    log.info("event=nofile_limit_raised from=%d to=%d", soft, target)
    return target, hard
