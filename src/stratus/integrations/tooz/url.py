"""A ``stratus://`` URL as the settings of the ZooKeeper session the backend opens.

``stratus://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...][/CHROOT][?OPTIONS]``; the options are
``timeout`` (the session timeout, seconds, default 10, as tooz's ZooKeeper driver),
``connection_timeout`` (how long a call or the start waits for ZooKeeper, default the
session timeout) and ``root`` (the znode under the chroot where the backend keeps its
groups, default ``/tooz``). A user and password authenticate with ZooKeeper's digest
scheme, and every znode then gets that identity's ACL::

    zk_settings(urllib.parse.urlsplit("stratus://zk1:2181,zk2:2181/app?timeout=5"), {})
    # ZkSettings(hosts="zk1:2181,zk2:2181/app", root="/tooz", session_timeout=5.0, ...)
"""

from __future__ import annotations

from typing import Any

from stratus.integrations.tooz.errors import ToozUrlError
from stratus.zk.auth import AuthScheme, ZkAuth, ZkCredentials
from stratus.zk.session import ZkSettings

DEFAULT_ROOT = "/tooz"
DEFAULT_SESSION_TIMEOUT = 10.0  # tooz's ZooKeeper driver's default, so switching keeps it
KNOWN_OPTIONS = frozenset({"timeout", "connection_timeout", "root"})


def zk_settings(parsed_url: Any, options: dict[str, Any]) -> ZkSettings:
    """The session settings of a parsed ``stratus://`` URL and its options (tooz's form:
    each value a list, the last one counts, or a plain value given to ``get_coordinator``)."""
    values = {
        key: value[-1] if isinstance(value, list) else value for key, value in options.items()
    }
    unknown = sorted(set(values) - KNOWN_OPTIONS)
    if unknown:
        raise ToozUrlError(
            f"unknown option(s) {', '.join(unknown)} in the stratus:// URL; "
            f"known: {', '.join(sorted(KNOWN_OPTIONS))}"
        )
    hosts = parsed_url.hostname and parsed_url.netloc.rpartition("@")[2]
    if not hosts:
        raise ToozUrlError(
            "the stratus:// URL names no ZooKeeper server: use stratus://HOST:PORT[,HOST:PORT]"
        )
    chroot = parsed_url.path.rstrip("/")
    session_timeout = _seconds(values, "timeout", DEFAULT_SESSION_TIMEOUT)
    try:
        return ZkSettings(
            hosts=hosts + chroot,
            root=str(values.get("root", DEFAULT_ROOT)),
            session_timeout=session_timeout,
            connection_timeout=_seconds(values, "connection_timeout", session_timeout),
            auth=_auth(parsed_url),
        )
    except ValueError as exc:
        raise ToozUrlError(f"invalid stratus:// URL: {exc}") from None


def _seconds(values: dict[str, Any], key: str, default: float) -> float:
    if key not in values:
        return default
    try:
        return float(values[key])
    except (TypeError, ValueError):
        raise ToozUrlError(
            f"option {key}={values[key]!r} of the stratus:// URL is not a number of seconds"
        ) from None


def _auth(parsed_url: Any) -> ZkAuth:
    if not parsed_url.username:
        return ZkAuth()
    if not parsed_url.password:
        raise ToozUrlError(
            "the stratus:// URL names a user but no password: use stratus://USER:PASSWORD@HOST"
        )
    return ZkAuth(AuthScheme.DIGEST, ZkCredentials(parsed_url.username, parsed_url.password))
