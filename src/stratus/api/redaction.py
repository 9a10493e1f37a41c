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
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, TypeVar

from stratus.api.records import Assignment, PipelineRecord, PipelineWorkers

REDACTED = "***"
# Words that make a key secret when they are a whole word of it.
SECRET_WORDS = frozenset(
    {"key", "keys", "pass", "pwd", "auth", "keytab", "passphrase", "apikey", "privatekey"}
)
# Fragments that make a key secret wherever they appear in it (case-insensitive).
SECRET_FRAGMENTS = ("password", "passwd", "secret", "token", "credential", "private")
_WORD_SEPARATORS = re.compile(r"[._\-]+")
_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")

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


def redact_record(record: R) -> R:
    """A pipeline record or an assignment with its conf redacted (the same one if it holds
    no secret)."""
    redacted = redact_conf(record.conf)
    if redacted == record.conf:
        return record
    return record.model_copy(update={"conf": redacted})


def redact_workers(workers: PipelineWorkers) -> PipelineWorkers:
    """Where a pipeline runs, its assignment's conf redacted."""
    if workers.assignment is None:
        return workers
    return workers.model_copy(update={"assignment": redact_record(workers.assignment)})


_URL_CREDENTIALS = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]+@")


def redact_text(text: str) -> str:
    """``text`` (an installer's output, say) with the credentials of every URL in it
    (``https://user:token@host``) replaced by ``REDACTED``."""
    return _URL_CREDENTIALS.sub(lambda m: f"{m.group('scheme')}{REDACTED}@", text)
