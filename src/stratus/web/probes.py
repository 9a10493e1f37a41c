"""``/healthz`` and ``/readyz``: the probes every stratus daemon answers on its HTTP port.

``/healthz`` is liveness: the process answers HTTP, so it is ``200`` whenever it answers at
all (a kubelet restarts a daemon whose probe times out, not one that is merely not ready).
``/readyz`` is readiness: ``200`` when every one of the daemon's checks passes, else ``503``,
with each check named in the body, so a load balancer sends traffic only to a ready daemon
and an operator sees why one is not::

    GET /readyz  ->  503 {"daemon": "nimbus", "ready": false,
                          "checks": {"zookeeper": true, "code": false}}

Both are open: a load balancer or a kubelet probes without credentials, so the servers'
role check lets exactly these two paths through (``OPEN_PATHS``), and the bodies hold
nothing but the daemon's kind and the names and outcomes of its checks. Each daemon decides
its checks (docs/metrics.md lists them)::

    add_probe_routes(app, "supervisor", lambda: {"zookeeper": ..., "registered": ...})
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping

from fastapi import FastAPI
from fastapi.responses import Response

HEALTHZ_PATH = "/healthz"
READYZ_PATH = "/readyz"
OPEN_PATHS = frozenset({HEALTHZ_PATH, READYZ_PATH})
JSON = "application/json"

Checks = Callable[[], Mapping[str, bool]]  # check name -> passed, read at each probe


def alive(daemon: str) -> tuple[int, bytes]:
    """The liveness answer: always 200 (answering is the proof)."""
    return 200, json.dumps({"daemon": daemon, "alive": True}).encode()


def readiness(daemon: str, checks: Checks) -> tuple[int, bytes]:
    """The readiness answer: 200 if every check passes, else 503; a check that raises fails."""
    try:
        results = {name: bool(passed) for name, passed in checks().items()}
    except Exception as exc:  # a probe must answer, and unsure is not ready
        results = {f"error:{type(exc).__name__}": False}
    ready = all(results.values())
    body = {"daemon": daemon, "ready": ready, "checks": results}
    return (200 if ready else 503), json.dumps(body).encode()


def add_probe_routes(app: FastAPI, daemon: str, checks: Checks) -> None:
    """``GET /healthz`` and ``GET /readyz`` on ``app``, outside its OpenAPI document."""

    @app.get(HEALTHZ_PATH, include_in_schema=False)
    def healthz() -> Response:
        status, body = alive(daemon)
        return Response(body, status_code=status, media_type=JSON)

    @app.get(READYZ_PATH, include_in_schema=False)
    def readyz() -> Response:
        status, body = readiness(daemon, checks)
        return Response(body, status_code=status, media_type=JSON)
