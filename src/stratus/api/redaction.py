"""Redaction of a pipeline's secret conf values wherever stratus shows a conf.

A conf key looks secret when one of its words (the parts between ``.``, ``_`` and ``-``, in
any case) is one of ``SECRET_WORDS`` (``password``, ``secret``, ``token``, ``credential``,
``key``, ...) or it contains ``password``/``secret``/``token``/``credential`` anywhere
(``spark.hadoop.fs.s3a.access.key``, ``pipeline.env.DB_PASSWORD``, ``spark.myApiToken``).
Its value is shown as ``REDACTED`` (``"***"``) in the API's responses, the status page, the
CLI's output and the logs; ZooKeeper keeps the real value and the worker receives it::

    redact_conf({"spark.hadoop.fs.s3a.secret.key": "abc", "spark.x": 1})
    # {"spark.hadoop.fs.s3a.secret.key": "***", "spark.x": 1}
    redact_record(record)        # the record, its conf (and an assignment's) redacted

``keystore``, ``keyStore`` or ``monkey`` are not secret (``key`` must be a word of its own,
or end a camelCase word: ``accessKey``); ``...keytab`` and ``...passphrase`` are.

Free text that can carry conf values or a pipeline's own output (a FAILED worker's log tail,
a record's ``reason``) goes through ``redact_text``: every secret value of the pipeline's conf
that occurs in it, the value of every ``secret-looking-key=value`` (or ``: value``) pair, a
bearer token, and the password of a URL (its user part when it has none: a token) become
``REDACTED``::

    redact_text("boom: DB_PASSWORD=hunter2 at postgres://app:pw@db", {})
    # "boom: DB_PASSWORD=*** at postgres://app:***@db"

A conf sent back to a nimbus (a rebalance, a submit) may hold ``REDACTED`` for a secret key:
the client read the conf from the API and changed something else. ``restore_redacted`` keeps
the value the pipeline already has for such a key, and refuses the conf (``invalid_conf``,
naming the key) when there is none to keep: ZooKeeper never stores the marker over a secret.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, TypeVar

from stratus.api.echo import echo
from stratus.api.errors import InvalidConfError
from stratus.api.records import Assignment, PipelineRecord, PipelineWorkers, WorkerHeartbeat

REDACTED = "***"
# Words that make a key secret when they are a whole word of it.
SECRET_WORDS = frozenset(
    {"key", "keys", "pass", "pwd", "auth", "keytab", "passphrase", "apikey", "privatekey"}
)
# Fragments that make a key secret wherever they appear in it (case-insensitive).
SECRET_FRAGMENTS = ("password", "passwd", "secret", "token", "credential", "private")
_WORD_SEPARATORS = re.compile(r"[._\-]+")
_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")

# A conf value shorter than this is not searched for in free text: "1" or "on" would hide
# half of a log line; such a value still goes when it follows its key (``key=1``).
MIN_SECRET_CHARS = 4
# ``key=value``, ``key: value``, ``"key": "value"``: the key, its separator, then the value
# (quoted, or up to a space, comma, quote or closing bracket).
_PAIR = re.compile(
    r"""(?<![A-Za-z0-9_.\-])(?P<key>[A-Za-z_][A-Za-z0-9_.\-]*)(?P<sep>["']?\s*[=:]\s*)"""
    r"""(?P<value>"[^"\n]*"|'[^'\n]*'|[^\s,;'"}\])]+)"""
)
_BEARER = re.compile(r"(?i)\b(bearer|basic)(\s+)[A-Za-z0-9._~+/=\-]+")
# A scheme is looked for only where a run of its characters starts: from inside one, the
# scan of the run again would make a long word cost the square of its length.
_SCHEME = r"(?<![A-Za-z0-9+.\-])[0-9+.\-]*[A-Za-z][A-Za-z0-9+.\-]*://"
_URL_PASSWORD = re.compile(rf"(?P<head>{_SCHEME}[^\s/:@]*:)[^\s/@]+(?=@)")
_URL_TOKEN_USER = re.compile(rf"(?P<head>{_SCHEME})[^\s/:@]+(?=@)")  # a token

NO_CONF: Mapping[str, Any] = MappingProxyType({})

R = TypeVar("R", PipelineRecord, Assignment)


def is_secret_key(key: str) -> bool:
    """Whether the value of conf key ``key`` is to be hidden; see the module docstring."""
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


def redact_conf(conf: Mapping[str, Any]) -> dict[str, Any]:
    """``conf`` with the value of every secret-looking key replaced by ``REDACTED``."""
    return {key: REDACTED if is_secret_key(key) else value for key, value in conf.items()}


def secret_values(conf: Mapping[str, Any]) -> list[str]:
    """The values of ``conf``'s secret-looking keys, as text, longest first (so that a value
    that contains another is replaced whole)."""
    values = {
        str(value)
        for key, value in conf.items()
        if is_secret_key(key) and value is not None and len(str(value)) >= MIN_SECRET_CHARS
    }
    values.discard(REDACTED)
    return sorted(values, key=len, reverse=True)


def redact_text(text: str, conf: Mapping[str, Any] = NO_CONF) -> str:
    """``text`` with every secret it may carry replaced by ``REDACTED``; see the module
    docstring. ``conf`` is the pipeline's real conf, whose secret values are looked for."""
    for value in secret_values(conf):
        text = text.replace(value, REDACTED)
    text = _PAIR.sub(_redact_pair, text)
    text = _BEARER.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    text = _URL_PASSWORD.sub(lambda m: f"{m.group('head')}{REDACTED}", text)
    return _URL_TOKEN_USER.sub(lambda m: f"{m.group('head')}{REDACTED}", text)


def _redact_pair(match: re.Match[str]) -> str:
    key, sep, value = match.group("key"), match.group("sep"), match.group("value")
    if not is_secret_key(key) or value.strip("\"'") == REDACTED:
        return match.group(0)
    quote = value[0] if value[:1] in ("'", '"') else ""
    return f"{key}{sep}{quote}{REDACTED}{quote}"


def restore_redacted(conf: Mapping[str, Any], current: Mapping[str, Any]) -> dict[str, Any]:
    """``conf`` with every secret key that holds ``REDACTED`` given its value in ``current``
    (the pipeline's conf so far); InvalidConfError naming the key when ``current`` has none."""
    restored = dict(conf)
    for key, value in conf.items():
        if value != REDACTED or not is_secret_key(key):
            continue
        kept = current.get(key)
        if kept is None or kept == REDACTED:
            raise InvalidConfError(
                f"conf key {echo(key)} holds {REDACTED!r}, the marker the API shows in place "
                "of a secret, and the pipeline has no value of it to keep: send the real value"
            )
        restored[key] = kept
    return restored


def redact_record(record: R) -> R:
    """A pipeline record or an assignment with its conf redacted, and a record's staged
    update's conf and its ``reason`` (the same one if it holds no secret)."""
    update: dict[str, Any] = {}
    redacted = redact_conf(record.conf)
    if redacted != record.conf:
        update["conf"] = redacted
    if not isinstance(record, PipelineRecord):
        return record.model_copy(update=update) if update else record
    staged = record.update
    if staged is not None and redact_conf(staged.conf) != staged.conf:
        update["update"] = staged.model_copy(update={"conf": redact_conf(staged.conf)})
    if record.reason:
        confs = {**record.conf, **(staged.conf if staged is not None else {})}
        reason = redact_text(record.reason, confs)
        if reason != record.reason:
            update["reason"] = reason
    return record.model_copy(update=update) if update else record


def redact_heartbeat(beat: WorkerHeartbeat, conf: Mapping[str, Any] = NO_CONF) -> WorkerHeartbeat:
    """A worker's heartbeat with its ``error`` and its last crash's (log tails) redacted
    against ``conf``."""
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
    return beat.model_copy(update=update) if update else beat


def redact_workers(
    workers: PipelineWorkers,
    conf: Mapping[str, Any] = NO_CONF,
) -> PipelineWorkers:
    """Where a pipeline runs: its assignment's conf redacted, and every worker's error, against
    ``conf`` (the pipeline record's) and the assignment's conf."""
    assignment = workers.assignment
    known = {**(assignment.conf if assignment else {}), **conf}
    return workers.model_copy(
        update={
            "assignment": redact_record(assignment) if assignment is not None else None,
            "workers": [redact_heartbeat(beat, known) for beat in workers.workers],
        }
    )
