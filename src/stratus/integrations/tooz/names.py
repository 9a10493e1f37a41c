"""tooz's ids (any bytes) as znode and election group names, and back, one to one.

An id that is already a plain name (ASCII letters, digits and ``_ . : -``, starting with a
letter or digit, at most 200 characters) is used as it is, so ``stratus elect --show`` finds
a tooz group under its own name. Any other id becomes ``x@`` and its hex digits; no plain
name contains ``@``, so the two forms never meet::

    node_name(b"scheduler")      # "scheduler"
    node_name(b"a/b c")          # "x@612f622063"
    raw_id("x@612f622063")       # b"a/b c"
"""

from __future__ import annotations

import re

from stratus.integrations.tooz.errors import ToozNameError

_PLAIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$")
_ESCAPED = "x@"
MAX_NAME = 200  # the election library's limit on a group name


def as_bytes(value: bytes | str) -> bytes:
    """tooz callers may pass ``str`` where the API says bytes: normalise to bytes (UTF-8)."""
    return value if isinstance(value, bytes) else value.encode("utf-8")


def node_name(raw: bytes | str) -> str:
    """The znode (and election group) name of a tooz group, member or lock id."""
    raw = as_bytes(raw)
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        text = None
    if text is not None and _PLAIN.match(text):
        return text
    name = _ESCAPED + raw.hex()
    if len(name) > MAX_NAME:
        raise ToozNameError(
            f"id {raw!r} is too long for the stratus backend: at most "
            f"{(MAX_NAME - len(_ESCAPED)) // 2} bytes, or {MAX_NAME} letters, digits and "
            "_ . : - ; use a shorter id"
        )
    return name


def raw_id(name: str) -> bytes:
    """The tooz id that ``node_name`` turned into ``name``."""
    if name.startswith(_ESCAPED):
        return bytes.fromhex(name[len(_ESCAPED) :])
    return name.encode("ascii")


def member_text(member_id: bytes | str) -> str:
    """A tooz member id as the election library's member id (a str), losslessly."""
    return as_bytes(member_id).decode("utf-8", errors="surrogateescape")


def member_bytes(member: str) -> bytes:
    """The inverse of ``member_text``."""
    return member.encode("utf-8", errors="surrogateescape")
