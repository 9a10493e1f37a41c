"""The audit trail: one structured line for every call that changes something, and for
every refusal (401, 403), on the logger ``stratus.web.audit``.

Each line names who (the principal and role that ``RequireRole`` identified, ``-`` when
unknown), what (the verb: ``submit``, ``kill``, ``fence``, ``cede-active``, ...), which
pipeline, the result (the HTTP status and the API's error code), the request id (the
caller's ``request_id``, else its ``X-Request-Id`` header, else one made here; the answer
carries it as ``X-Request-Id``) and the remote address. A server says which of its calls
are audited and what they are (``AuditRule``); a route may note the pipeline and the
request id it learnt from the body (``note_audit``). Where the lines go is
``stratus.logs.configure_audit_log`` (``audit.log.file``)::

    app = AuditTrail(app, "supervisor", rule)
    note_audit(request.scope, pipeline="etl", request_id="r1")   # in a route
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from stratus.api.echo import MAX_ECHO_CHARS, clip
from stratus.web.authorization import caller_of

AUDIT = logging.getLogger(__name__)  # "stratus.web.audit": configure_audit_log sends it
NOTE = "stratus.audit_note"  # the scope's state: what a route learnt (pipeline, request id)
REQUEST_ID_HEADER = b"x-request-id"
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
REFUSALS = frozenset({401, 403})
MAX_ERROR_BODY_BYTES = 8 * 1024

# (method, path) -> (verb, pipeline or None) for an audited call, None for a read
AuditRule = Callable[[str, str], tuple[str, str | None] | None]


def changes_only(method: str, path: str) -> tuple[str, str | None] | None:
    """The default rule: every call but a read is audited, its verb the path's last part."""
    if method.upper() in READ_METHODS:
        return None
    return path.rstrip("/").rsplit("/", 1)[-1] or "/", None


def note_audit(scope: Scope, *, pipeline: str | None = None, request_id: str = "") -> None:
    """What a route learnt of its call, for the audit line: the pipeline, the request id."""
    note = scope.setdefault("state", {}).setdefault(NOTE, {})
    if pipeline:
        note["pipeline"] = pipeline
    if request_id:
        note["request_id"] = request_id


class AuditTrail:
    """ASGI middleware: the audit line of every call that ``rule`` names, and of every
    refusal; outside the role check, so that its refusals are seen."""

    def __init__(self, app: ASGIApp, daemon: str, rule: AuditRule = changes_only) -> None:
        self.app = app
        self.daemon = daemon
        self.rule = rule

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        described = self.rule(scope["method"], scope["path"])
        given = dict(scope["headers"]).get(REQUEST_ID_HEADER)
        request_id = clip(given.decode("latin-1"), MAX_ECHO_CHARS) if given else ""
        status = 500
        error_body = b""
        audited = described is not None

        async def send_noting(message: Message) -> None:
            nonlocal status, error_body, audited, request_id
            if message["type"] == "http.response.start":
                status = message["status"]
                audited = audited or status in REFUSALS
                if audited:
                    request_id = _request_id(scope, request_id)
                    message["headers"] = [
                        *message.get("headers", []),
                        (REQUEST_ID_HEADER, request_id.encode("latin-1", errors="replace")),
                    ]
            elif (
                message["type"] == "http.response.body"
                and audited
                and status >= 400
                and len(error_body) < MAX_ERROR_BODY_BYTES
            ):
                error_body += message.get("body", b"")
            await send(message)

        try:
            await self.app(scope, receive, send_noting)
        finally:
            if audited:
                verb, pipeline = described or ("read", None)
                self._write(scope, (verb, pipeline), status, error_body, request_id)

    def _write(
        self,
        scope: Scope,
        call: tuple[str, str | None],
        status: int,
        error_body: bytes,
        request_id: str,
    ) -> None:
        verb, pipeline = call
        note: dict[str, Any] = (scope.get("state") or {}).get(NOTE) or {}
        caller = caller_of(scope)
        client = scope.get("client")
        AUDIT.info(
            "event=audit daemon=%s principal=%s role=%s verb=%s pipeline=%s status=%d "
            "error=%s request_id=%s remote=%s method=%s path=%s",
            self.daemon,
            caller.principal if caller is not None else "-",
            caller.role.value if caller is not None else "-",
            verb,
            clip(note.get("pipeline") or pipeline or "-", MAX_ECHO_CHARS),
            status,
            _error_code(status, error_body),
            _request_id(scope, request_id),
            client[0] if client else "-",
            scope["method"],
            clip(scope["path"], MAX_ECHO_CHARS),
        )


def _request_id(scope: Scope, header: str) -> str:
    """The call's id: the one its body named, else its header's, else a new one (kept)."""
    note = scope.setdefault("state", {}).setdefault(NOTE, {})
    found = note.get("request_id") or header or note.get("made")
    if not found:
        found = note["made"] = uuid.uuid4().hex
    return str(found)


def _error_code(status: int, body: bytes) -> str:
    if status < 400:
        return "-"
    try:
        parsed = json.loads(body)
    except ValueError:
        return "-"
    code = parsed.get("error") if isinstance(parsed, dict) else None
    return clip(code, MAX_ECHO_CHARS) if isinstance(code, str) else "-"
