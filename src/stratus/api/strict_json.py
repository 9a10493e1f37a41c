"""Strict parsing of untrusted JSON: one meaning per document, bounded depth, real text.

Python's ``json.loads`` keeps the last of two equal keys (another parser, a proxy or an
audit log may keep the first: the same bytes then mean two things), nests as deep as the
interpreter's stack allows, and returns
strings with lone surrogates (``"\\ud800"``), which no UTF-8 encoder writes back: stored in a
record, such a string fails every later read. ``loads_strict`` refuses each of them with
``InvalidRequestError`` naming the problem, never echoing the document. (``NaN`` and
``Infinity`` are read, and refused where they matter: a conf's check says which key.)::

    loads_strict('{"conf": {"a": 1}}')          # {"conf": {"a": 1}}
    loads_strict('{"a": 1, "a": 2}')            # InvalidRequestError: the key 'a' twice
"""

from __future__ import annotations

import json
from typing import Any

from stratus.api.echo import echo
from stratus.api.errors import InvalidRequestError

MAX_DEPTH = 32  # a conf is flat; bodies nest a few levels


def loads_strict(text: str | bytes, what: str = "the body") -> Any:
    """The JSON value of ``text``; InvalidRequestError (422) naming what is wrong with it."""
    try:
        value = json.loads(text, object_pairs_hook=_unique_keys)
    except _DuplicateKeyError as exc:
        raise InvalidRequestError(
            f"{what} holds the key {echo(exc.key)} twice in one JSON object: send each key once"
        ) from None
    except RecursionError:
        raise InvalidRequestError(f"{what} nests deeper than {MAX_DEPTH} levels") from None
    except UnicodeDecodeError:
        raise InvalidRequestError(f"{what} is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise InvalidRequestError(
            f"{what} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    check_value(value, what)
    return value


def check_value(value: Any, what: str, depth: int = 0) -> None:
    """Refuse nesting past ``MAX_DEPTH`` and strings that are not valid Unicode."""
    if depth > MAX_DEPTH:
        raise InvalidRequestError(f"{what} nests deeper than {MAX_DEPTH} levels")
    if isinstance(value, str):
        _check_text(value, what)
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_text(key, what)
            check_value(item, what, depth + 1)
    elif isinstance(value, list):
        for item in value:
            check_value(item, what, depth + 1)


def _check_text(text: str, what: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidRequestError(
            f"{what} holds a string that is not valid Unicode (a lone surrogate at "
            f"character {exc.start}): send UTF-8 text"
        ) from None


class _DuplicateKeyError(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKeyError(key)
        result[key] = value
    return result
