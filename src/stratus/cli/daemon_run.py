"""How a daemon command runs: start, say it is ready, serve until told to stop, then stop.

A daemon stops on SIGTERM or SIGINT, and also when its ZooKeeper session failed for good
(``ZkSession.failure``: history behind, credentials refused): the command then exits with
that error, not with an echo of it from whatever call it broke. On SIGHUP it calls
``reload`` (the nimbus, the supervisor and the zkfc read their token file again), on the
main thread, between two checks::

    run_daemon(Nimbus(settings), ready=lambda d: f"nimbus {d.address} serving ...",
               reload=lambda d: d.policy.reload())
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Mapping
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
    reload: Callable[[D], object] | None = None,
    stop_signals: Mapping[int, Callable[[D], None]] | None = None,
) -> None:
    """Start ``daemon``, print ``ready(daemon)`` on stderr, then every ``period_secs`` run
    ``check`` (which raises to stop it) until a signal, and ``reload`` after each SIGHUP;
    ``daemon.stop()`` in every case. A signal of ``stop_signals`` stops it too, after its
    callback told the daemon how (the supervisor: its workers with it)."""
    stop = threading.Event()
    wake = threading.Event()
    hangups = threading.Event()
    extra = dict(stop_signals or {})

    def stopped(signum: int, _frame: object) -> None:
        if signum in extra:
            extra[signum](daemon)
        stop.set()
        wake.set()

    def hung_up(_signum: int, _frame: object) -> None:
        hangups.set()
        wake.set()

    for signum in (signal.SIGTERM, signal.SIGINT, *extra):
        signal.signal(signum, stopped)
    if reload is not None:
        signal.signal(signal.SIGHUP, hung_up)
    try:
        daemon.start()
    except Exception:
        if daemon.session.failure is None:
            raise
        raise daemon.session.failure from None  # what made ZooKeeper unusable, not its echo
    click.echo(ready(daemon), err=True)
    try:
        while True:
            wake.wait(period_secs)
            wake.clear()
            if stop.is_set():
                break
            if daemon.session.failure is not None:
                raise daemon.session.failure
            if reload is not None and hangups.is_set():
                hangups.clear()
                reload(daemon)
            check(daemon)
    finally:
        daemon.stop()
