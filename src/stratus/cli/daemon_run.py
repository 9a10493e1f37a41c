"""How a daemon command runs: start, say it is ready, serve until told to stop, then stop.

A daemon stops on SIGTERM or SIGINT, and also when its ZooKeeper session failed for good
(``ZkSession.failure``: history behind, credentials refused): the command then exits with
that error, not with an echo of it from whatever call it broke::

    run_daemon(Nimbus(conf), ready=lambda d: f"nimbus {d.address} serving ...")
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import Protocol, TypeVar

import click

from stratus.zk.session import ZkSession


class Daemon(Protocol):
    session: ZkSession

    def start(self) -> None: ...

    def stop(self) -> None: ...


D = TypeVar("D", bound=Daemon)


def run_daemon(
    daemon: D,
    *,
    ready: Callable[[D], str],
    check: Callable[[D], None] = lambda _daemon: None,
    period_secs: float = 1.0,
) -> None:
    """Start ``daemon``, print ``ready(daemon)`` on stderr, then every ``period_secs`` run
    ``check`` (which raises to stop it) until a signal; ``daemon.stop()`` in every case."""
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda _s, _f: stop.set())
    try:
        daemon.start()
    except Exception:
        if daemon.session.failure is None:
            raise
        raise daemon.session.failure from None  # what made ZooKeeper unusable, not its echo
    click.echo(ready(daemon), err=True)
    try:
        while not stop.wait(period_secs):
            if daemon.session.failure is not None:
                raise daemon.session.failure
            check(daemon)
    finally:
        daemon.stop()
