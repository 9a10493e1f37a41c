"""Logging of the daemons: one line per event on stderr, as ``key=value`` text or as JSON.

Every stratus log call names its event and its fields in the message template, and passes
the values as arguments (``log.info("event=leader_elected epoch=%d member=%s", 4, "n1")``).
``event_fields`` reads them back from the template and the arguments, not from the rendered
text, so a value keeps its type and its spaces. ``TextFormatter`` prints them as
``key=value`` with one quoting rule (a value with a space, a quote, an ``=`` or nothing is
written as a JSON string); ``JsonFormatter`` prints one JSON object per line with the same
fields (``log.format: json``), for a log collector::

    2026-11-25T00:34:01.123Z level=INFO logger=stratus.x event=elected epoch=4 member=n1
    {"time": "2026-11-25T00:34:01.123Z", "level": "INFO", "logger": "stratus.x",
     "event": "elected", "epoch": 4, "member": "n1"}          (one line)

A message that is not ``key=value`` (a library's) goes under ``message``; an exception's
traceback under ``exception``. Fields that differ from one call to the next (the details of
a state machine's transition) are passed with ``extra=with_fields(...)``: each is a field of
the line as well, after the template's, with its type kept::

    log.warning("event=worker_backoff pipeline=%s", "etl",
                extra=with_fields(restart_in_secs=2.0, error="exit 1: boom"))
    {..., "event": "worker_backoff", "pipeline": "etl", "restart_in_secs": 2.0,
     "error": "exit 1: boom"}

A flood of the same error (a client hammering a closed port, an accept loop out of file
descriptors) must not become a flood of log lines: ``RepeatLimit`` lets the first
``REPEAT_MAX`` records of a kind (logger and message template) through in each
``REPEAT_INTERVAL_SECS``, drops the rest, and says how many it dropped when the kind is
next let through. It applies to warnings and above; information lines are not repeated
errors.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

REPEAT_MAX = 10  # records of one kind let through per interval
REPEAT_INTERVAL_SECS = 60.0
MAX_KINDS = 1024  # kinds remembered at once; the oldest interval's are forgotten first
# Chatty below warnings (httpx: a line per request, so every health check of a zkfc):
# kept at warnings and above.
LIBRARY_LOGGERS = ("kazoo", "uvicorn", "httpx", "httpcore", "py4j")

_PLACEHOLDER = re.compile(r"%(?:%|[-#0 +]*(?:\d+|\*)?(?:\.(?:\d+|\*))?[diouxXeEfFgGcrsa])")
_FIELD = re.compile(r"^([A-Za-z_][\w.]*)=(.*)$", re.DOTALL)
_BARE = re.compile(r"^[^\s\"'=\\]+$")
_RESERVED = ("time", "level", "logger")
EXTRA_FIELDS = "stratus_fields"  # the record attribute that with_fields sets


class LogFormat(StrEnum):
    """How a daemon writes its log lines (``log.format``)."""

    TEXT = "text"
    JSON = "json"


@dataclass(frozen=True)
class LogSettings:
    """A daemon's logging: the lowest level written and the format of the lines."""

    level: int = logging.INFO
    format: LogFormat = LogFormat.TEXT


class RepeatLimit(logging.Filter):
    """Let ``limit`` records of a kind through per ``interval_secs``; count the others."""

    def __init__(
        self,
        limit: int = REPEAT_MAX,
        interval_secs: float = REPEAT_INTERVAL_SECS,
        *,
        level: int = logging.WARNING,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.limit = limit
        self.interval_secs = interval_secs
        self.level = level
        self._clock = clock
        self._lock = threading.Lock()
        # kind -> [interval start, records let through, records dropped]
        self._kinds: dict[tuple[str, str], list[float]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < self.level:
            return True
        kind = (record.name, str(record.msg))
        now = self._clock()
        with self._lock:
            seen = self._kinds.get(kind)
            if seen is None or now - seen[0] >= self.interval_secs:
                dropped = 0 if seen is None else int(seen[2])
                self._remember(kind, [now, 1, 0])
                if dropped:
                    record.msg = f"{record.msg} suppressed_before={dropped}"
                return True
            if seen[1] < self.limit:
                seen[1] += 1
                return True
            seen[2] += 1
            return False

    def _remember(self, kind: tuple[str, str], state: list[float]) -> None:
        if kind not in self._kinds and len(self._kinds) >= MAX_KINDS:
            oldest = min(self._kinds, key=lambda k: self._kinds[k][0])
            del self._kinds[oldest]
        self._kinds[kind] = state


def event_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The ``key=value`` fields of a record, read from its template and its arguments: a
    ``%s`` or ``%r`` value as it was passed (a string unquoted), ``%d`` an int, ``%f`` a float
    at the template's precision. Words that are not ``key=value`` go under ``message``; a
    template whose placeholders do not match its arguments is kept whole as ``message``."""
    template, args = record.msg, record.args
    if not isinstance(template, str) or not isinstance(args, tuple):
        return {"message": _message(record)}
    fields: dict[str, Any] = {}
    words: list[str] = []
    remaining = list(args)
    for token in template.split():
        wanted = [p for p in _PLACEHOLDER.findall(token) if p != "%%"]
        if len(wanted) > len(remaining):
            return {"message": _message(record)}
        taken, remaining = remaining[: len(wanted)], remaining[len(wanted) :]
        field = _FIELD.match(token)
        if field is None or field.group(1) in fields:
            words.append(_render(token, taken))
        elif len(wanted) == 1 and field.group(2) == wanted[0]:
            fields[field.group(1)] = _typed(wanted[0], taken[0])
        else:
            fields[field.group(1)] = _render(field.group(2), taken)
    if remaining:
        return {"message": _message(record)}
    if words:
        fields["message"] = " ".join(words)
    return fields


def with_fields(**fields: Any) -> dict[str, Any]:
    """The ``extra=`` of a log call: ``fields`` become fields of its line (see the module
    docstring); a value that is not a str, bool, int, float or None is written as its str."""
    return {EXTRA_FIELDS: fields}


def _message(record: logging.LogRecord) -> str:
    """The record's text, even when its arguments do not fit its template."""
    try:
        return record.getMessage()
    except (TypeError, ValueError):
        return f"{record.msg} {record.args!r}"


def _render(text: str, args: list[Any]) -> str:
    if not args:
        return text  # as logging does: a template without arguments is not %-formatted
    try:
        return text % tuple(args)
    except (TypeError, ValueError):
        return " ".join([text, *map(str, args)])


def _typed(placeholder: str, value: Any) -> Any:
    """One argument as its field's value, as its placeholder asks."""
    conversion = placeholder[-1]
    if conversion in "sr" and "." not in placeholder:
        if value is None or isinstance(value, str | bool | int | float):
            return value
        return str(value) if conversion == "s" else repr(value)
    rendered = _render(placeholder, [value])
    if conversion in "di":
        return int(rendered)
    if conversion in "eEfFgG":
        return float(rendered)
    return rendered


def _timestamp(record: logging.LogRecord) -> str:
    moment = datetime.fromtimestamp(record.created, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


class ContextFields(logging.Filter):
    """Adds the same fields to every record, after ``logger``: a worker's pipeline and
    epoch, so that each line of its log says whose it is."""

    def __init__(self, fields: Mapping[str, Any]) -> None:
        super().__init__()
        self.fields = dict(fields)

    def filter(self, record: logging.LogRecord) -> bool:
        record.context_fields = self.fields
        return True


def _fields_of(record: logging.LogRecord) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "time": _timestamp(record),
        "level": record.levelname,
        "logger": record.name,
        **getattr(record, "context_fields", {}),
    }
    for key, value in event_fields(record).items():
        fields[f"field.{key}" if key in _RESERVED else key] = value
    for key, value in getattr(record, EXTRA_FIELDS, {}).items():
        plain = value is None or isinstance(value, str | bool | int | float)
        fields[f"field.{key}" if key in _RESERVED else key] = value if plain else str(value)
    return fields


class TextFormatter(logging.Formatter):
    """``time level=... logger=... key=value ...``: one line per event, one quoting rule."""

    def format(self, record: logging.LogRecord) -> str:
        line = " ".join(
            f"{key}={_text_value(value)}" if key != "time" else str(value)
            for key, value in _fields_of(record).items()
        )
        if record.exc_info:
            line = f"{line}\n{self.formatException(record.exc_info)}"
        if record.stack_info:
            line = f"{line}\n{self.formatStack(record.stack_info)}"
        return line


def _text_value(value: Any) -> str:
    text = str(value)
    return text if _BARE.match(text) else json.dumps(text, ensure_ascii=False)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``time``, ``level``, ``logger``, then the event's fields,
    and ``exception`` with the traceback when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        fields = _fields_of(record)
        if record.exc_info:
            fields["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            fields["stack"] = self.formatStack(record.stack_info)
        return json.dumps(fields, ensure_ascii=False, default=str)


def configure_daemon_logging(
    settings: LogSettings | None = None,
    *,
    context: Mapping[str, Any] | None = None,
    replace: bool = False,
) -> None:
    """Log at ``settings.level`` and above to stderr in ``settings.format``, repeated
    warnings limited; the libraries' (``LIBRARY_LOGGERS``) from warnings up (or the level,
    if higher). ``context`` fields go on every line (a worker's pipeline and epoch);
    ``replace`` swaps the handlers already there (a warm worker given its pipeline)."""
    settings = settings or LogSettings()
    handler = logging.StreamHandler()
    formatter = JsonFormatter() if settings.format is LogFormat.JSON else TextFormatter()
    handler.setFormatter(formatter)
    handler.addFilter(RepeatLimit())
    if context:
        handler.addFilter(ContextFields(context))
    # Only where nothing logs yet (a daemon's process), unless replacing: a command run inside
    # another program (a test's CliRunner) leaves that program's handlers alone.
    logging.basicConfig(level=settings.level, handlers=[handler], force=replace)
    for name in LIBRARY_LOGGERS:
        logging.getLogger(name).setLevel(max(logging.WARNING, settings.level))


AUDIT_LOGGER = "stratus.web.audit"
AUDIT_FILE_MODE = 0o600


def configure_audit_log(path: str | None) -> None:
    """Where the audit trail (the logger ``stratus.web.audit``) goes: with ``path``, one JSON
    object a line appended to that file (created 0600), and not to the daemon's log;
    without, into the daemon's log like any other line."""
    audit = logging.getLogger(AUDIT_LOGGER)
    audit.setLevel(logging.INFO)
    handler = None
    if path is not None:
        descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, AUDIT_FILE_MODE)
        os.close(descriptor)  # created with the mode; FileHandler opens it to append
        handler = logging.FileHandler(path, encoding="utf-8")
        handler.setFormatter(JsonFormatter())
    for old in list(audit.handlers):
        audit.removeHandler(old)
        old.close()
    if handler is not None:
        audit.addHandler(handler)
    audit.propagate = handler is None
