"""Redaction of a pipeline's secrets wherever stratus shows a conf or free text.

A conf entry is redacted when its key looks secret, or when its value carries a secret in
one of the forms below, as Spark's ``spark.redaction.regex`` looks at the key and the value.

A conf key looks secret when one of its words (the parts between ``.``, ``_`` and ``-``, in
any case, or the last word of a camelCase part) is one of ``SECRET_WORDS`` (``key``,
``pwd``, ``sig``, ...) or it contains one of ``SECRET_FRAGMENTS`` (``password``, ``secret``,
``token``, ...) anywhere (``spark.hadoop.fs.s3a.access.key``, ``pipeline.env.DB_PASSWORD``,
``spark.myApiToken``). Its whole value is shown as ``REDACTED`` (``"***"``).

The value of any other key is shown with only its secret parts replaced, so that a reader
still sees where it points (``redact_value``); the forms of a secret in text
(``secret_spans``), the same in a conf value and in free text:

- the password of a URL, or its user part when it has none (a token):
  ``mongodb://app:***@db/x``, ``https://***@host/x``;
- a query or connection-string parameter whose name looks secret (by the key rule:
  ``password``, ``pwd``, ``secret``, ``token``, ``access_token``, ``key``, ``apikey``,
  ``sig``, ``signature``, ``sas``, ``credential``, ...), after ``?``, ``&`` or ``;``:
  ``jdbc:postgresql://db/x?user=u&password=***``, an Azure SAS's ``&sig=***``, a SQL Server
  JDBC URL's ``;password=***``, an AWS presigned URL's ``X-Amz-Signature=***``;
- a ``key=value``, ``key: value``, ``"key": "value"`` pair whose key looks secret, a JVM
  property ``-Dkey=value`` too: a Kafka JAAS config's ``password="***"``,
  ``DB_PASSWORD=***``;
- an Oracle JDBC URL's ``user/***@host``;
- the token after ``Bearer`` or ``Basic``::

    redact_conf({"spark.hadoop.fs.s3a.secret.key": "abc", "spark.x": 1,
                 "spark.myapp.source": "jdbc:postgresql://db/x?user=u&password=pw"})
    # {"spark.hadoop.fs.s3a.secret.key": "***", "spark.x": 1,
    #  "spark.myapp.source": "jdbc:postgresql://db/x?user=u&password=***"}
    redact_record(record)        # the record, its conf (and an assignment's) redacted

``keystore``, ``keyStore`` or ``monkey`` are not secret (``key`` must be a word of its own,
or end a camelCase word: ``accessKey``); ``...keytab`` and ``...passphrase`` are.

Free text that can carry conf values or a pipeline's own output (a FAILED worker's log tail,
a record's ``reason``, a log line) goes through ``redact_text``: every secret of the
pipeline's conf that occurs in it (a secret key's value, a secret part of another value),
and every secret in one of the forms above, become ``REDACTED``::

    redact_text("boom: DB_PASSWORD=hunter2 at postgres://db/x?user=app&password=pw", {})
    # "boom: DB_PASSWORD=*** at postgres://db/x?user=app&password=***"

A conf sent back to a nimbus (a rebalance, a submit) may hold ``REDACTED`` where the API
showed it: the client read the conf from the API and changed something else.
``restore_redacted`` keeps the value the pipeline already has for a secret key that holds
``REDACTED``, and for any other key whose value is exactly what the API shows of the value
kept; it refuses the conf (``invalid_conf``, naming the key) when a marker stands for no
value to keep: ZooKeeper never stores the marker over a secret.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import Any, TypeVar

from stratus.api.echo import echo
from stratus.api.errors import InvalidConfError
from stratus.api.records import Assignment, PipelineRecord, PipelineWorkers, WorkerHeartbeat
from stratus.api.standby_workers import StandbyWorkerView

REDACTED = "***"
# Words that make a key (or a query parameter) secret when they are a whole word of it.
SECRET_WORDS = frozenset(
    {
        "key", "keys", "pass", "pwd", "auth", "keytab", "passphrase", "apikey", "privatekey",
        "sig", "signature", "sas",
    }
)  # fmt: skip
# Fragments that make a key secret wherever they appear in it (case-insensitive).
SECRET_FRAGMENTS = ("password", "passwd", "secret", "token", "credential", "private")
_WORD_SEPARATORS = re.compile(r"[._\-]+")
_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")

# A secret shorter than this is not searched for in free text: "1" or "on" would hide half
# of a log line; such a value still goes when it is in one of the forms (``key=1``).
MIN_SECRET_CHARS = 4
MAX_LINE_BYTES = 64 * 1024  # a longer line of a log is redacted and sent in pieces
# How many keys, and text values of at most MAX_CACHED_CHARS, keep their redaction in memory.
CACHED_VALUES = 8192
MAX_CACHED_CHARS = 1024
_KEY = r"[A-Za-z_][A-Za-z0-9_.\-]*"
# ``key=``, ``key: ``, ``"key": ``, ``-Dkey=``: a key (not inside a longer one, but after a
# JVM option's ``-D``) and its separator; then the value (``_PAIR_VALUE``) when the key looks
# secret: quoted, or up to a space, comma, semicolon, quote, closing bracket, or an ``&``
# that starts the next ``name=``.
_PAIR_HEAD = re.compile(rf"""(?:(?<=-D)|(?<![A-Za-z0-9_.\-]))(?P<key>{_KEY})["']?\s*[=:]\s*""")
_PAIR_VALUE = re.compile(
    rf""""[^"\n]*"|'[^'\n]*'|["']?(?:[^\s,;'"}}\])&]|&(?!{_KEY}=))+"""
)  # a quote left open (a log tail cut short) is followed by a bare value
# A query or connection-string parameter: ``?name=value``, ``&name=value``, ``;name=value``.
_PARAM = re.compile(rf"""(?<=[?&;])(?P<key>{_KEY})=(?P<secret>[^&;#\s"'<>]+)""")
_BEARER = re.compile(r"(?i)\b(?:bearer|basic)\s+(?P<secret>[A-Za-z0-9._~+/=*\-]+)")
# A scheme is looked for only where a run of its characters starts: from inside one, the
# scan of the run again would make a long word cost the square of its length.
_SCHEME = r"(?<![A-Za-z0-9+.\-])[0-9+.\-]*[A-Za-z][A-Za-z0-9+.\-]*://"
_URL_PASSWORD = re.compile(rf"{_SCHEME}[^\s/:@]*:(?P<secret>[^\s/@]+)(?=@)")
_URL_TOKEN_USER = re.compile(rf"{_SCHEME}(?P<secret>[^\s/:@]+)(?=@)")  # a token
_ORACLE_PASSWORD = re.compile(r"(?i)\bjdbc:oracle:[a-z0-9]+:[^\s/:@]+/(?P<secret>[^\s/@]+)(?=@)")

NO_CONF: Mapping[str, Any] = MappingProxyType({})

R = TypeVar("R", PipelineRecord, Assignment)
Span = tuple[int, int]


def is_secret_key(key: str) -> bool:
    """Whether the value of conf key ``key`` is to be hidden; see the module docstring."""
    return _cached_is_secret_key(key) if len(key) <= MAX_CACHED_CHARS else _is_secret_key(key)


def _is_secret_key(key: str) -> bool:
    lowered = key.lower()
    if any(fragment in lowered for fragment in SECRET_FRAGMENTS):
        return True
    for part in _WORD_SEPARATORS.split(key):
        camel_words = _CAMEL_BOUNDARY.split(part)
        # a whole part (``.key``, ``_KEY``), or the last word of a camelCase part
        # (``accessKey``, not ``keyStore``)
        if part.lower() in SECRET_WORDS or camel_words[-1].lower() in SECRET_WORDS:
            return True
    return False


# Every list and status page looks at the same keys again, and free text at the same words.
_cached_is_secret_key = functools.lru_cache(maxsize=CACHED_VALUES)(_is_secret_key)


def _pair_secrets(text: str) -> Iterator[Span]:
    """The value after every secret-looking key's ``=`` or ``:``, inside its quotes. A key
    that does not look secret leaves its value to be scanned, so that a pair inside it is
    seen (``error: password=x``, ``url=h?x&password=x``)."""
    covered = 0  # the end of the last secret value: the pairs inside it go with it
    for head in _PAIR_HEAD.finditer(text):
        if head.start() < covered or not is_secret_key(head.group("key")):
            continue
        value = _PAIR_VALUE.match(text, head.end())
        if value is None:
            continue
        start, end = value.span()
        covered = end
        quote = value.group()[0]
        if quote in ("'", '"'):
            start += 1
            if len(value.group()) > 1 and value.group()[-1] == quote:
                end -= 1
        yield start, end


def _form(pattern: re.Pattern[str], *, keyed: bool = False) -> Callable[[str], Iterator[Span]]:
    """The ``secret`` group of every match of ``pattern``; with ``keyed``, of every match
    whose ``key`` group looks secret."""

    def spans(text: str) -> Iterator[Span]:
        for match in pattern.finditer(text):
            if not keyed or is_secret_key(match.group("key")):
                yield match.span("secret")

    return spans


# The forms in which text carries a secret: each gives where its secrets are in a text.
SECRET_FORMS: tuple[Callable[[str], Iterator[Span]], ...] = (
    _pair_secrets,
    _form(_PARAM, keyed=True),
    _form(_BEARER),
    _form(_URL_PASSWORD),
    _form(_URL_TOKEN_USER),
    _form(_ORACLE_PASSWORD),
)


def secret_spans(text: str) -> list[Span]:
    """Where ``text`` holds a secret in one of ``SECRET_FORMS``, possibly overlapping; an
    empty secret (``password=""``) is none."""
    return [span for form in SECRET_FORMS for span in form(text) if span[0] < span[1]]


def _replaced(text: str, spans: Iterable[Span]) -> str:
    """``text`` with every span (overlapping or adjacent ones as one) replaced by REDACTED."""
    out: list[str] = []
    done = 0
    for start, end in sorted(spans):
        if start < done or (start == done and out):  # inside or right after the last one
            done = max(done, end)
            continue
        out.append(text[done:start])
        out.append(REDACTED)
        done = end
    out.append(text[done:])
    return "".join(out)


def redact_value(key: str, value: Any) -> Any:
    """What stratus shows of conf entry ``key``: REDACTED for a secret key, a text value with
    its secret parts replaced by REDACTED, any other value as it is."""
    if is_secret_key(key):
        return REDACTED
    if not isinstance(value, str):
        return value
    return _cached_shown(value) if len(value) <= MAX_CACHED_CHARS else _shown(value)


def _shown(value: str) -> str:
    return _replaced(value, secret_spans(value))


# A list or a status page redacts the same confs again and again, and the scan of a value
# costs several times the check of its key.
_cached_shown = functools.lru_cache(maxsize=CACHED_VALUES)(_shown)


def redact_conf(conf: Mapping[str, Any]) -> dict[str, Any]:
    """``conf`` as stratus shows it: every value through ``redact_value``."""
    return {key: redact_value(key, value) for key, value in conf.items()}


def holds_marker(value: str) -> bool:
    """Whether ``value`` holds REDACTED where a secret would be: a conf value the API showed."""
    return any(value[start:end] == REDACTED for start, end in secret_spans(value))


def secret_values(conf: Mapping[str, Any]) -> list[str]:
    """The secrets of ``conf`` as text, longest first (so that a secret that contains
    another is replaced whole): the values of its secret-looking keys and the secret parts
    of its other text values, each at least MIN_SECRET_CHARS long."""
    values: set[str] = set()
    for key, value in conf.items():
        if value is None:
            continue
        if is_secret_key(key):
            values.add(str(value))
        elif isinstance(value, str):
            values.update(value[start:end] for start, end in secret_spans(value))
    values.discard(REDACTED)
    return sorted((v for v in values if len(v) >= MIN_SECRET_CHARS), key=len, reverse=True)


def redact_text(text: str, conf: Mapping[str, Any] = NO_CONF) -> str:
    """``text`` with every secret it may carry replaced by ``REDACTED``; see the module
    docstring. ``conf`` is the pipeline's real conf, whose secrets are looked for."""
    return _redact_text(text, secret_values(conf))


def _redact_text(text: str, secrets: Iterable[str]) -> str:
    spans = secret_spans(text)
    for secret in secrets:
        start = text.find(secret)
        while start != -1:
            spans.append((start, start + len(secret)))
            start = text.find(secret, start + len(secret))
    return _replaced(text, spans) if spans else text


class LineRedactor:
    """Cuts a byte stream (a worker's log) into lines and redacts each against ``conf``; a
    partial line waits for its end (up to ``MAX_LINE_BYTES``)."""

    def __init__(self, conf: Mapping[str, Any]) -> None:
        self._secrets = secret_values(conf)
        self._partial = b""

    def feed(self, data: bytes) -> bytes:
        """The redacted complete lines that ``data`` finishes."""
        buffered = self._partial + data
        cut = buffered.rfind(b"\n") + 1
        if cut == 0 and len(buffered) >= MAX_LINE_BYTES:
            cut = len(buffered)
        self._partial = buffered[cut:]
        return self._redacted(buffered[:cut])

    def flush(self) -> bytes:
        rest, self._partial = self._partial, b""
        return self._redacted(rest)

    def _redacted(self, data: bytes) -> bytes:
        if not data:
            return b""
        return _redact_text(data.decode("utf-8", errors="replace"), self._secrets).encode()


def restore_redacted(conf: Mapping[str, Any], current: Mapping[str, Any]) -> dict[str, Any]:
    """``conf`` with what the API showed of ``current`` (the pipeline's conf so far) given
    back its real value: a secret key that holds ``REDACTED``, and any other value that is
    exactly what ``redact_value`` shows of the value kept. InvalidConfError naming the key
    when a secret key holds ``REDACTED`` and there is no value to keep, or another value
    holds ``REDACTED`` in place of a secret and is not what the API shows of the value
    kept."""
    restored = dict(conf)
    for key, value in conf.items():
        if is_secret_key(key):
            if value != REDACTED:
                continue
            kept = current.get(key)
            if kept is None or kept == REDACTED:
                raise InvalidConfError(
                    f"conf key {echo(key)} holds {REDACTED!r}, the marker the API shows in "
                    "place of a secret, and the pipeline has no value of it to keep: send the "
                    "real value"
                )
            restored[key] = kept
        elif isinstance(value, str):
            kept = current.get(key)
            if isinstance(kept, str) and kept != value and redact_value(key, kept) == value:
                restored[key] = kept  # exactly what the API shows of the value kept
            elif holds_marker(value):
                raise InvalidConfError(
                    f"conf key {echo(key)} holds {REDACTED!r} in place of a secret in its "
                    "value (a URL's password, a secret parameter), the marker the API shows, "
                    "and the value is not the one the API shows of the pipeline's: send the "
                    "value with the real secret"
                )
    return restored


def redact_record(record: R) -> R:
    """A pipeline record or an assignment with its conf redacted, and a record's staged
    update's conf, its kept versions' confs and its ``reason`` (the same one if it holds no
    secret)."""
    update: dict[str, Any] = {}
    redacted = redact_conf(record.conf)
    if redacted != record.conf:
        update["conf"] = redacted
    if not isinstance(record, PipelineRecord):
        return record.model_copy(update=update) if update else record
    staged = record.update
    if staged is not None and redact_conf(staged.conf) != staged.conf:
        update["update"] = staged.model_copy(update={"conf": redact_conf(staged.conf)})
    kept = [
        version.model_copy(update={"conf": redact_conf(version.conf)})
        for version in record.versions
    ]
    if kept != record.versions:
        update["versions"] = kept
    if record.reason:
        confs = {**record.conf, **(staged.conf if staged is not None else {})}
        for version in record.versions:
            confs = {**version.conf, **confs}
        reason = redact_text(record.reason, confs)
        if reason != record.reason:
            update["reason"] = reason
    return record.model_copy(update=update) if update else record


def redact_heartbeat(beat: WorkerHeartbeat, conf: Mapping[str, Any] = NO_CONF) -> WorkerHeartbeat:
    """A worker's heartbeat with its ``error``, its last crash's (log tails) and its refused
    update's redacted against ``conf``."""
    update: dict[str, Any] = {}
    if beat.error:
        error = redact_text(beat.error, conf)
        if error != beat.error:
            update["error"] = error
    crash = beat.last_crash
    if crash is not None:
        crash_error = redact_text(crash.error, conf)
        if crash_error != crash.error:
            update["last_crash"] = crash.model_copy(update={"error": crash_error})
    refused = beat.refused
    if refused is not None:
        refused_error = redact_text(refused.error, conf)
        if refused_error != refused.error:
            update["refused"] = refused.model_copy(update={"error": refused_error})
    return beat.model_copy(update=update) if update else beat


def redact_workers(
    workers: PipelineWorkers,
    conf: Mapping[str, Any] = NO_CONF,
) -> PipelineWorkers:
    """Where a pipeline runs: its assignment's conf redacted, and every worker's error and its
    standby worker's, against ``conf`` (the pipeline record's) and the assignment's conf."""
    assignment = workers.assignment
    known = {**(assignment.conf if assignment else {}), **conf}
    standby = workers.standby_worker
    return workers.model_copy(
        update={
            "assignment": redact_record(assignment) if assignment is not None else None,
            "workers": [redact_heartbeat(beat, known) for beat in workers.workers],
            "standby_worker": redact_standby_worker(standby, known) if standby else None,
        }
    )


def redact_standby_worker(
    standby: StandbyWorkerView, conf: Mapping[str, Any] = NO_CONF
) -> StandbyWorkerView:
    """A standby worker with its error and its refusals' reasons (which may quote an error)
    redacted against ``conf``."""
    refusals = [
        refusal.model_copy(update={"reason": redact_text(refusal.reason, conf)})
        for refusal in standby.refusals
    ]
    error = redact_text(standby.error, conf) if standby.error else standby.error
    return standby.model_copy(update={"refusals": refusals, "error": error})
