"""The settings a client reads from the configuration: how it presents itself to a nimbus
(``client_auth``) and what a package may be (``package_limits``).

They are ``stratus.settings``'s too (it re-exports them), but live apart from it so that the
``stratus`` command's client verbs, and its shell completion, load none of the daemons'
libraries (ZooKeeper, the HTTP server, code distribution) that ``stratus.settings`` needs::

    with NimbusClient(seeds, auth=client_auth(conf)) as client: ...
    check_package(path, package_limits(conf))
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from stratus.codedist.package_check import PackageLimits
from stratus.config import StratusConfig
from stratus.security.client_auth import ClientAuth
from stratus.security.tls import TlsSettings
from stratus.security.tokens import read_token

TOKEN_ENV_VAR = "STRATUS_TOKEN"


def package_limits(conf: StratusConfig) -> PackageLimits:
    """``nimbus.max.upload.bytes`` and ``package.max.*``: what a package may be."""
    return PackageLimits(
        max_bytes=conf.nimbus_max_upload_bytes,
        max_unpacked_bytes=conf.package_max_unpacked_bytes,
        max_ratio=conf.package_max_ratio,
        max_entries=conf.package_max_entries,
    )


def client_auth(conf: StratusConfig, environ: Mapping[str, str] | None = None) -> ClientAuth:
    """``client.auth.token`` (else ``client.auth.token.file``, else ``STRATUS_TOKEN``) and
    ``client.tls.*``: how a client, a supervisor or a fetching nimbus presents itself.

    TLS is on when ``client.tls.ca`` or ``client.tls.cert`` is set, and also when
    ``nimbus.tls.cert`` is: a daemon that serves https itself is in a cluster that speaks
    TLS, so it never sends a token to a peer in clear (it then verifies peers against the
    system's trust store unless ``client.tls.ca`` names the cluster's CA)."""
    environ = os.environ if environ is None else environ
    token = conf.client_auth_token
    if token is None and conf.client_auth_token_file:
        token = read_token(Path(conf.client_auth_token_file))
    if token is None:
        token = environ.get(TOKEN_ENV_VAR) or None
    tls = None
    if conf.client_tls_ca or conf.client_tls_cert or conf.nimbus_tls_cert:
        tls = TlsSettings(cert=conf.client_tls_cert, key=conf.client_tls_key, ca=conf.client_tls_ca)
    return ClientAuth(token=token, tls=tls)
