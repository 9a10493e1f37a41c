"""The nimbus client's two timeouts, on real sockets: a short one for the connect (a nimbus on
a dead host answers no SYN and is left soon), the request timeout for the answer (a slow
nimbus is waited for).

The dead nimbus is a listener whose accept queue is held full (``unanswered_address``); the
live one a small HTTP server answering ``GET /api/v1/leader``, after a pause if told to.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from stratus.api.records import LeaderInfo
from stratus.client import NimbusClient
from stratus.config import load_config
from tests.harness.code_server import unanswered_address

CONNECT_SECS = 0.1
HOUR = 3600.0  # the request timeout: a connect that waited it would hang the test
LEADER = LeaderInfo(address="10.0.0.7:6627", epoch=4)


@contextlib.contextmanager
def nimbus(pause_secs: float = 0.0) -> Iterator[tuple[str, list[str]]]:
    """A nimbus that names ``LEADER`` after ``pause_secs``: its address and the paths asked."""
    asked: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            time.sleep(pause_secs)  # the slow nimbus of the scenario, not a synchronisation
            body = LEADER.model_dump_json().encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}", asked
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.mark.timeout(60)
def test_a_nimbus_that_takes_no_connection_is_left_after_the_connect_timeout() -> None:
    with unanswered_address() as dead, nimbus() as (live, asked):
        conf = load_config(
            overrides=[
                f"nimbus.seeds={dead},{live}",
                f"client.request.timeout.secs={HOUR}",
                f"client.connect.timeout.secs={CONNECT_SECS}",
                "client.retry.deadline.secs=0.001",  # one attempt: each seed asked once
            ],
            environ={},
        )
        with NimbusClient.from_config(conf) as client:
            assert client.leader() == LEADER  # the dead seed first, then the live one
    assert asked == ["/api/v1/leader"]


@pytest.mark.timeout(60)
def test_an_answer_slower_than_the_connect_timeout_is_waited_for() -> None:
    with (
        nimbus(pause_secs=10 * CONNECT_SECS) as (live, asked),
        NimbusClient(
            [live], retry_deadline=0.0, request_timeout=HOUR, connect_timeout=CONNECT_SECS
        ) as client,
    ):
        assert client.leader() == LEADER
    assert asked == ["/api/v1/leader"]  # answered on the first try, not after a timeout
