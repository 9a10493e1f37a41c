"""The pacemaker's wire format: length-prefixed msgpack frames over TCP (or TLS).

A frame is a 4-byte big-endian body length followed by that many bytes of msgpack, one map.
A request carries ``id`` (an integer the client chooses) and ``op`` (one of ``Op``); its
answer carries the same ``id``, ``ok`` and either the operation's fields or ``error`` (a code
of ``ErrorCode``) with a ``message``. A length above the maximum frame size is refused before
a byte of the body is read, so a peer cannot make either side allocate more than that::

    wire = encode_frame({"id": 7, "op": "exists", "path": "/a"}, max_frame_bytes=1 << 20)
    decoder = FrameDecoder(max_frame_bytes=1 << 20)
    decoder.feed(wire)     # [{"id": 7, "op": "exists", "path": "/a"}]

A first frame that starts with ``GET `` is not a frame: its length would be 1.2 GB. The server
reads such a connection as HTTP (``/metrics``), which is why no maximum may reach that size.
"""

from __future__ import annotations

import enum
import struct
from typing import Any

import msgpack

from stratus.pacemaker.errors import FrameError

HEADER = struct.Struct(">I")
HEADER_BYTES = HEADER.size
MAX_FRAME_LIMIT = 64 << 20  # no configured maximum above this: b"GET " must never be a length
HTTP_PREFIX = b"GET "


class Op(enum.StrEnum):
    """The operations of a request."""

    HELLO = "hello"  # -> auth method, server nonce, warming
    AUTHENTICATE = "authenticate"  # principal, proof=HMAC(secret, nonce ...) -> role
    CREATE_PATH = "create_path"
    EXISTS = "exists"
    SEND_PULSE = "send_pulse"  # path, data (bytes), time (writer's epoch seconds)
    SEND_PULSES = "send_pulses"  # pulses: [[path, data, time], ...]: a supervisor's period
    GET_PULSE = "get_pulse"
    GET_ALL_PULSES_FOR_PATH = "get_all_pulses_for_path"
    GET_ALL_NODES_FOR_PATH = "get_all_nodes_for_path"
    DELETE_PATH = "delete_path"
    DELETE_PULSE_ID = "delete_pulse_id"
    STATUS = "status"  # warming, entries, bytes


class ErrorCode(enum.StrEnum):
    """The ``error`` of an answer that is not ``ok``."""

    MALFORMED = "malformed"  # not a request: bad fields or types; unknown op
    NOT_AUTHENTICATED = "not_authenticated"
    AUTH_FAILED = "auth_failed"
    FORBIDDEN = "forbidden"
    BAD_PATH = "bad_path"
    FULL = "full"
    TOO_LARGE = "too_large"  # the answer would exceed the maximum frame


def encode_frame(message: dict[str, Any], *, max_frame_bytes: int) -> bytes:
    """One frame holding ``message``; FrameError if its body exceeds ``max_frame_bytes``."""
    try:
        body: bytes = msgpack.packb(message, use_bin_type=True)
    except (OverflowError, TypeError, ValueError) as exc:
        raise FrameError(f"a message cannot be encoded: {exc}") from None
    if len(body) > max_frame_bytes:
        raise FrameError(
            f"a frame of {len(body)} bytes exceeds the maximum of {max_frame_bytes} bytes "
            "(pacemaker.max.frame.bytes)"
        )
    return HEADER.pack(len(body)) + body


def decode_body(body: bytes) -> dict[str, Any]:
    """The map in a frame's body; FrameError if it is not exactly one msgpack map."""
    try:
        # msgpack bounds every container and string by the length of the buffer given.
        message = msgpack.unpackb(body, raw=False, strict_map_key=True, use_list=True)
    except (ValueError, TypeError, msgpack.UnpackException, RecursionError) as exc:
        raise FrameError(f"a frame's body is not msgpack: {type(exc).__name__}") from None
    if not isinstance(message, dict):
        raise FrameError(f"a frame's body is a {type(message).__name__}, not a map")
    return message


class FrameDecoder:
    """Turns a byte stream into messages; holds at most one header and one frame's body.

    The bytes of an unfinished frame wait in one growing buffer: a frame that arrives a
    byte at a time costs work in proportion to its size, not to its size squared.
    """

    def __init__(self, *, max_frame_bytes: int) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._pending = bytearray()  # the start of a frame whose rest has not come yet

    @property
    def buffered(self) -> int:
        """Bytes held, waiting for the rest of their frame."""
        return len(self._pending)

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        """The messages completed by ``data``; FrameError on the first bad frame."""
        pending = self._pending
        pending += data
        try:
            return self._frames(pending)
        except FrameError:
            pending.clear()  # the stream is broken: nothing of it is kept
            raise

    def _frames(self, pending: bytearray) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = []
        offset, end = 0, len(pending)
        while end - offset >= HEADER_BYTES:
            (length,) = HEADER.unpack_from(pending, offset)
            if length > self.max_frame_bytes:
                raise FrameError(
                    f"a frame announces {length} bytes, above the maximum of "
                    f"{self.max_frame_bytes} bytes"
                )
            start = offset + HEADER_BYTES
            if end - start < length:
                break
            messages.append(decode_body(bytes(pending[start : start + length])))
            offset = start + length
        if offset:
            del pending[:offset]  # at most a header and a body of the maximum stay
        return messages
