"""Bounds on the API's connections: how many, and how long one may stay silent.

uvicorn closes a kept-alive connection that is idle after a response, and can answer 503
past ``limit_concurrency``, but it accepts every connection and waits forever for a first
request: a thousand clients that connect and send nothing hold a thousand descriptors. The
protocol made here closes a connection at once past ``max_connections``, and closes one
that has not sent a whole request head within ``header_timeout_secs`` of opening (or of its
last response: a slow trickle of header bytes counts as silence)::

    uvicorn.Config(app, **uvicorn_options(HttpBounds(4096, 10.0, 5.0, 16384)))
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HttpBounds:
    """The API server's connection bounds (``nimbus.http.*``)."""

    max_connections: int  # nimbus.http.max.connections
    header_timeout_secs: float  # nimbus.http.header.timeout.secs
    keepalive_secs: float  # nimbus.http.keepalive.secs
    max_header_bytes: int  # nimbus.http.max.header.bytes


def uvicorn_options(bounds: HttpBounds, base: type[H11Protocol] = H11Protocol) -> dict[str, Any]:
    """The ``uvicorn.Config`` keyword arguments that apply ``bounds`` to the ``base`` protocol."""
    return {
        "http": bounded_protocol(bounds, base),
        "log_config": None,  # uvicorn logs through the daemon's handlers (and their limits)
        # uvicorn answers 503 once connections or tasks reach it; connections stop at the bound
        "limit_concurrency": bounds.max_connections + 1,
        "timeout_keep_alive": bounds.keepalive_secs,
        "h11_max_incomplete_event_size": bounds.max_header_bytes,
    }


def bounded_protocol(
    bounds: HttpBounds, base: type[H11Protocol] = H11Protocol
) -> type[H11Protocol]:
    """uvicorn's h11 protocol (or ``base``, a subclass of it) with ``bounds`` applied; see the
    module docstring."""
    bases = (_BoundedH11Protocol,) if base is H11Protocol else (_BoundedH11Protocol, base)
    protocol: type[H11Protocol] = type("BoundedH11Protocol", bases, {"bounds": bounds})
    return protocol


class _BoundedH11Protocol(H11Protocol):
    bounds: HttpBounds
    _head_timer: asyncio.TimerHandle | None = None
    _armed_cycle: object = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.bounds.max_connections:
            log.warning(
                "event=connection_refused reason=max_connections max=%d",
                self.bounds.max_connections,
            )
            # Out of the count at once: until connection_lost it would count against the
            # connections within the bound, and uvicorn would answer one of them 503.
            self.connections.discard(self)
            transport.close()
            return
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
        super().connection_lost(exc)

    def on_response_complete(self) -> None:
        self._arm_head_timer()  # before a pipelined request may start the next cycle
        super().on_response_complete()

    def _arm_head_timer(self) -> None:
        self._disarm_head_timer()
        self._armed_cycle = self.cycle  # a new request replaces the cycle
        self._head_timer = self.loop.call_later(
            self.bounds.header_timeout_secs, self._head_timed_out
        )

    def _disarm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.cycle is self._armed_cycle and not self.transport.is_closing():
            self.transport.close()  # no request began: nothing to answer
