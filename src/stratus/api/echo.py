"""Bounded echoes of untrusted input in error messages.

An error message that repeats what a client sent helps the client, until the input is a
gigabyte: then the message is the attack. Every message that quotes input quotes it through
``echo``, which keeps ``repr`` of at most ``MAX_ECHO_CHARS`` characters and says how much
was left out::

    echo("x" * 10_000)    # "'xxxx...xxxx'": 80 characters, the middle left out
    echo([1, 2])          # '[1, 2]'
    clip(message, 300)    # a composed message: its first 300 characters and a count
    printable("a\x1b[2Jb")  # 'a\\x1b[2Jb': free text safe to show on a terminal
"""

from __future__ import annotations

import re
import reprlib

MAX_ECHO_CHARS = 80

_REPR = reprlib.Repr()
_REPR.maxstring = MAX_ECHO_CHARS
_REPR.maxother = MAX_ECHO_CHARS
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 8
_REPR.maxlevel = 3


def echo(value: object, limit: int = MAX_ECHO_CHARS) -> str:
    """``repr(value)`` cut to ``limit`` characters, never building the whole repr of a big value."""
    try:
        text = _REPR.repr(value)  # bounded for containers and strings, nested ones too
    except ValueError:  # an int past Python's digit limit has no repr
        return f"<{type(value).__name__} too large to show>"
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text)} characters, {len(text) - limit} left out)"


def clip(text: str, limit: int = MAX_ECHO_CHARS * 4) -> str:
    """``text`` itself (not its repr) cut to ``limit`` characters: for composed messages."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit} characters left out)"


# Control characters but tab and newline (C0, DEL, C1): an escape sequence in a worker's
# log tail would otherwise retitle, clear or rewrite the terminal of whoever reads it.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` with every control character but tab and newline written as its escape
    (``\\x1b``): for free text from outside shown on a terminal."""
    return _CONTROL.sub(lambda match: f"\\x{ord(match.group()):02x}", text)
