"""The only two places where stratus reaches into kazoo's internals, each checked by a test
that fails if a kazoo upgrade changes them: learning the session timeout the server granted
(kazoo 2.11 only logs it), with the refusals of credentials on the way, and failing every
waiting request of a client being closed at once::

    capture_granted_timeout(client, note=session_granted, refused=session_refused)
    fail_waiting_calls(client)   # before closing it: a frozen server would delay kazoo's own
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    AuthFailedError,
    ConnectionDropped,
    SASLException,
    SessionClosedRequireSaslError,
)
from kazoo.protocol.states import KeeperState

log = logging.getLogger(__name__)

SASL_DROPS_REFUSE = 3  # connections dropped during SASL in a row that mean a refusal


def fail_waiting_calls(client: KazooClient) -> None:
    """Fail every request ``client`` holds, and refuse every later one, now: kazoo does the
    same (``_session_callback(CLOSED)``) only once its connection thread ends, which a
    frozen server delays by a whole read timeout. The second place that touches kazoo's
    internals; ``tests/cluster/test_daemon_stops.py`` stops a nimbus whose server froze."""
    callback = getattr(client, "_session_callback", None)
    if callback is None:
        log.warning("event=zookeeper_calls_not_failed reason=kazoo_changed")
        return
    callback(KeeperState.CLOSED)


def capture_granted_timeout(
    client: KazooClient,
    note: Callable[[float], None],
    refused: Callable[[Exception], None],
) -> None:
    """Learn the session timeout the server grants at each connection; kazoo 2.11 only logs it.

    One of the two places that touch kazoo's internals: its connection handler's
    ``_connect`` returns (read timeout, connect timeout) in ms, the read timeout being two
    thirds of the granted session timeout. ``tests/cluster/test_zk_session_cap.py`` fails if a kazoo
    upgrade changes that.
    A connection whose credentials the server refuses raises there too: ``refused`` hears it,
    as it hears a Kerberos library that cannot start for the configured principal.

    ZooKeeper refuses SASL credentials by dropping the connection, which kazoo reports as a
    refusal; but a member that loses its quorum or stops drops every connection too, one in
    the middle of its SASL exchange included. So a drop during SASL is retried (kazoo tries
    the next server) and taken as a refusal only at the ``SASL_DROPS_REFUSE``-th in a row.
    """
    handler = getattr(client, "_connection", None)
    connect = getattr(handler, "_connect", None)
    if connect is None:
        log.warning("event=granted_timeout_unknown using=requested")
        return
    drops = 0

    def capture(*args: Any) -> tuple[float, float]:
        nonlocal drops
        try:
            read_timeout, connect_timeout = connect(*args)
        except AuthFailedError as exc:
            if isinstance(exc.__cause__, ConnectionDropped) and drops + 1 < SASL_DROPS_REFUSE:
                drops += 1
                log.warning("event=zookeeper_sasl_dropped in_a_row=%d", drops)
                raise ConnectionDropped("the connection dropped during SASL") from exc
            refused(exc)  # kazoo's thread may die of it: the session must not wait forever
            raise
        except (SASLException, SessionClosedRequireSaslError) as exc:
            refused(exc)
            raise
        except Exception as exc:
            if type(exc).__module__ != "kerberos":
                raise
            # GSSAPI refused to start for the configured principal (no ticket, no keytab
            # entry) before kazoo's own handling: kazoo would retry it forever
            failure = AuthFailedError("Kerberos could not start GSSAPI")
            failure.__cause__ = exc
            refused(failure)
            raise failure from exc
        drops = 0
        note(read_timeout * 1.5 / 1000.0)
        return read_timeout, connect_timeout

    handler._connect = capture  # type: ignore[union-attr]
