"""Bounded echoes of untrusted input in error messages.

An error message that repeats what a client sent helps the client, until the input is a
gigabyte: then the message is the attack. Every message that quotes input quotes it through
``echo``, which keeps ``repr`` of at most ``MAX_ECHO_CHARS`` characters and says how much
was left out::

    echo("x" * 10_000)    # "'xxxx...xxxx'": 80 characters, the middle left out
    echo([1, 2])          # '[1, 2]'
    clip(message, 300)    # a composed message: its first 300 characters and a count
"""

from __future__ import annotations

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
