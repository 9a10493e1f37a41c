"""Logging set-up of the daemons: one key=value line per event, on stderr."""

from __future__ import annotations

import logging

FORMAT = "%(asctime)s level=%(levelname)s logger=%(name)s %(message)s"


def configure_daemon_logging(level: int = logging.INFO) -> None:
    """Log ``level`` and above to stderr; kazoo's chatter only from warnings up."""
    logging.basicConfig(level=level, format=FORMAT)
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    logging.getLogger("uvicorn").setLevel(logging.WARNING)
