"""The ``log.*``, ``audit.*`` and ``history.*`` keys: what the daemons write down."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from stratus.config.section import Section


class LogSection(Section):
    """The daemons' log lines: their level and format."""

    prefix: ClassVar[str] = "log"

    log_level: Literal["debug", "info", "warning", "error", "critical"] = Field(
        default="info",
        alias="log.level",
        description="daemons and `stratus elect`: the lowest level of the lines they log (debug, "
        "info, warning, error, critical; --log-level overrides)",
    )
    log_format: Literal["text", "json"] = Field(
        default="text",
        alias="log.format",
        description="daemons and `stratus elect`: text (one key=value line per event) or json "
        "(one JSON object per line, with the same fields)",
    )


class AuditSection(Section):
    """The daemons' audit trail."""

    prefix: ClassVar[str] = "audit"

    audit_log_file: str | None = Field(
        default=None,
        alias="audit.log.file",
        description="nimbus, supervisor and zkfc: file (created 0600) that the audit trail is "
        "appended to, one JSON object per line: every call that changes something and every "
        "refused call, with its caller (default: in the daemon's log)",
    )


class HistorySection(Section):
    """The record of events that the reliability oracle reads."""

    prefix: ClassVar[str] = "history"

    history_file: str | None = Field(
        default=None,
        alias="history.file",
        description="daemons and their workers append one JSON line per start, stop, batch "
        "and leader write to this file, for the reliability oracle (default: nothing recorded)",
    )
