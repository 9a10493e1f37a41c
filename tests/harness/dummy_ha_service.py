"""A small real service implementing the HA service protocol, steered by a test (DummyHAService).

Run as a separate process: ``python -m tests.harness.dummy_ha_service NAME SHARED_DIR [--port P]``.
It prints its port on stdout once it listens (``--cert``/``--key``: over TLS; ``--token``: the
HA routes want that bearer token, else 401), then serves:

- the four routes of ``stratus.ha.protocol``;
- ``POST /control`` with a JSON object that changes its behaviour: ``healthy`` (bool),
  ``ready`` (ready to become active), ``fail_active`` (refuse transition-to-active),
  ``refuse_standby`` (refuse transition-to-standby), ``report`` (a state its status reports
  instead of the real one, or null); ``GET /control`` answers the current behaviour and state.

The shared resource: while active, the service holds an exclusive ``flock`` on
``SHARED_DIR/active.lock`` (the kernel drops it when the process dies, even by SIGKILL). A
service made active while another one holds it writes ``conflict`` to ``SHARED_DIR/events``,
which every transition is appended to (``O_APPEND``, one line per event): two active
writers at once fail the test.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


class Dummy:
    def __init__(self, name: str, shared: Path) -> None:
        self.name = name
        self.shared = shared
        self.lock = threading.Lock()
        self.state = "standby"
        self.epoch: int | None = None
        self.behaviour: dict[str, Any] = {
            "healthy": True,
            "ready": True,
            "fail_active": False,
            "refuse_standby": False,
            "report": None,
        }
        self._lock_fd = os.open(shared / "active.lock", os.O_RDWR | os.O_CREAT, 0o600)
        self.address = ""
        self.token: str | None = None

    def record(self, event: str) -> None:
        line = f"{event} {self.name} {self.epoch} {time.time()!r}\n".encode()
        fd = os.open(self.shared / "events", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)

    def to_active(self, epoch: int) -> tuple[int, dict[str, Any]]:
        if self.behaviour["fail_active"]:
            self.record("refused_active")
            return 409, {"error": "transition_failed", "message": f"{self.name} refuses"}
        if self.epoch is not None and epoch < self.epoch:
            return 409, {"error": "stale_epoch", "message": f"{epoch} < {self.epoch}"}
        if self.state != "active":
            try:
                fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                self.epoch = epoch
                self.record("conflict")  # another service is active: the test must fail
        self.state, self.epoch = "active", epoch
        self.record("active")
        return 200, self.status()

    def to_standby(self) -> tuple[int, dict[str, Any]]:
        if self.behaviour["refuse_standby"]:
            self.record("refused_standby")
            return 409, {"error": "transition_failed", "message": f"{self.name} stays active"}
        if self.state == "active":
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            self.state = "standby"
            self.record("standby")
        return 200, self.status()

    def status(self) -> dict[str, Any]:
        return {
            "state": self.behaviour["report"] or self.state,
            "epoch": self.epoch,
            "ready_to_become_active": self.behaviour["ready"],
            "address": self.address,
        }

    def get(self, path: str) -> tuple[int, dict[str, Any]]:
        """The answer to a GET of ``path`` (under ``lock``)."""
        if path == "/ha/v1/status":
            return 200, self.status()
        if path == "/ha/v1/health":
            if self.behaviour["healthy"]:
                return 200, {"healthy": True}
            return 503, {"error": "unhealthy", "message": "told to be"}
        if path == "/control":
            return 200, {**self.behaviour, "state": self.state}
        return 404, {"error": "not_found", "message": path}

    def post(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """The answer to a POST of ``body`` to ``path`` (under ``lock``)."""
        if path == "/ha/v1/transition-to-active":
            return self.to_active(int(body["epoch"]))
        if path == "/ha/v1/transition-to-standby":
            return self.to_standby()
        if path == "/control":
            self.behaviour.update(body)
            return 200, self.behaviour
        return 404, {"error": "not_found", "message": path}


def handler(dummy: Dummy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def answer(self, code: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def body(self) -> dict[str, Any]:
            length = int(self.headers.get("Content-Length") or 0)
            return json.loads(self.rfile.read(length) or b"{}")  # type: ignore[no-any-return]

        def authorized(self) -> bool:
            if dummy.token is None or self.path == "/control":
                return True
            if self.headers.get("Authorization") == f"Bearer {dummy.token}":
                return True
            self.answer(401, {"error": "unauthorized", "message": "no or a wrong token"})
            return False

        def do_GET(self) -> None:
            if not self.authorized():
                return
            with dummy.lock:
                self.answer(*dummy.get(self.path))

        def do_POST(self) -> None:
            body = self.body()
            if not self.authorized():
                return
            with dummy.lock:
                self.answer(*dummy.post(self.path, body))

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("name")
    parser.add_argument("shared", type=Path)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token", default=None)
    parser.add_argument("--cert", default=None)
    parser.add_argument("--key", default=None)
    args = parser.parse_args()
    dummy = Dummy(args.name, args.shared)
    dummy.token = args.token
    server = ThreadingHTTPServer(("127.0.0.1", args.port), handler(dummy))
    if args.cert:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(args.cert, args.key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    dummy.address = f"127.0.0.1:{server.server_address[1]}"
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
