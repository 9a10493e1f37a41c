"""The settings of stratus's library layers, read from the configuration in one place.

The layers below the daemons (ZooKeeper, the election library, the state store, code
distribution) never read the configuration: they take small settings records, and this
module is where the configuration's keys become those records. The daemons' own settings
are built beside them (``nimbus/settings.py``, ``supervisor/settings.py``) from these, and
a client's (``client_auth``, ``package_limits``) in ``client_settings.py``, which loads none
of the daemons' libraries::

    session = ZkSession(zk_settings(conf))
    store = create_state_store(state_store_settings(conf), session.client, paths)
    create_distributor(distributor_settings(conf), client=session.client, ...)
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path

from stratus.client_settings import client_auth
from stratus.codedist.factory import DistributorSettings
from stratus.codedist.transfer.fetch import FetchSettings
from stratus.config import StratusConfig
from stratus.errors import ConfigError
from stratus.logs import LogFormat, LogSettings, configure_audit_log
from stratus.pacemaker.auth import AuthMethod, Secret, load_secrets
from stratus.pacemaker.client import parse_servers
from stratus.pacemaker.errors import PacemakerAuthFileError
from stratus.pacemaker.kerberos import (
    KerberosClientSettings,
    KerberosServerSettings,
    server_principal,
)
from stratus.pacemaker.settings import PacemakerClientSettings, PacemakerServerSettings
from stratus.pacemaker.store import StoreLimits
from stratus.security.access import AccessPolicy
from stratus.security.tls import TlsSettings
from stratus.security.tokens import Credentials, load_credentials
from stratus.state.factory import StateStoreSettings
from stratus.trail import TrailSettings
from stratus.web.bounds import HttpBounds
from stratus.zk.auth import (
    AuthScheme,
    ServerAuth,
    ZkAuth,
    ZnodeQuota,
    read_credentials,
    super_digest,
)
from stratus.zk.quorum_probe import Refusals
from stratus.zk.session import ZkSettings
from stratus.zk.tls import ServerTls, ZkTls


def zk_settings(conf: StratusConfig) -> ZkSettings:
    """``zookeeper.servers``, ``.root``, ``.session.timeout.secs``, ``.connection.timeout.secs``,
    ``.stop.wait.secs``, ``zookeeper.auth.*`` (whose credentials file is read here, once),
    ``zookeeper.ssl.*`` and ``zookeeper.outage.refusals``."""
    return ZkSettings(
        hosts=conf.zookeeper_hosts(),
        root=conf.zookeeper_root,
        session_timeout=conf.zookeeper_session_timeout_secs,
        connection_timeout=conf.zookeeper_connection_timeout_secs,
        stop_wait=conf.zookeeper_stop_wait_secs,
        auth=zk_auth(conf),
        tls=ZkTls(
            enabled=conf.zookeeper_ssl_enabled,
            ca_file=conf.zookeeper_ssl_ca_file,
            cert_file=conf.zookeeper_ssl_cert_file,
            key_file=conf.zookeeper_ssl_key_file,
            check_hostname=conf.zookeeper_ssl_check_hostname,
        ),
        outage_refusals=Refusals(conf.zookeeper_outage_refusals),
    )


def zk_auth(conf: StratusConfig) -> ZkAuth:
    """stratus's ZooKeeper identity: ``zookeeper.auth.scheme``, ``.file`` and ``.sasl.*``."""
    path = conf.zookeeper_auth_file
    return ZkAuth(
        scheme=AuthScheme(conf.zookeeper_auth_scheme),
        credentials=read_credentials(Path(path)) if path else None,
        sasl_mechanism=conf.zookeeper_auth_sasl_mechanism,
        sasl_service=conf.zookeeper_auth_sasl_service,
        sasl_principal=conf.zookeeper_auth_sasl_principal,
    )


def zk_server_auth(conf: StratusConfig, environ: Mapping[str, str] | None = None) -> ServerAuth:
    """What ``stratus zookeeper`` demands: ``zookeeper.server.auth.required``, its SASL users
    (stratus's own, ``zookeeper.auth.file``, unless ``zookeeper.server.sasl.jaas.file`` names
    the operator's JAAS configuration), its superuser (``.super.file``), the root and quota it
    locks (``zookeeper.root``, ``zookeeper.server.quota.*``), and the ``krb5.conf`` of its JVM
    (``zookeeper.server.sasl.krb5.conf``, else ``KRB5_CONFIG``, which MIT's tools of the same
    shell read but Java does not)."""
    environ = os.environ if environ is None else environ
    super_file = conf.zookeeper_server_super_file
    jaas = conf.zookeeper_server_sasl_jaas_file
    krb5 = conf.zookeeper_server_sasl_krb5_conf or environ.get("KRB5_CONFIG")
    required = conf.zookeeper_server_auth_required
    users = conf.zookeeper_auth_file if required and not jaas else None
    return ServerAuth(
        required=required,
        super_digest=super_digest(Path(super_file)) if super_file and not required else None,
        jaas_file=Path(jaas) if jaas else None,
        krb5_conf=Path(krb5) if krb5 else None,
        users=(read_credentials(Path(users)),) if users else (),
        superuser=read_credentials(Path(super_file)) if super_file and required else None,
        root=conf.zookeeper_root,
        quota=ZnodeQuota(
            znodes=conf.zookeeper_server_quota_count,
            data_bytes=conf.zookeeper_server_quota_bytes,
        ),
    )


def zk_server_tls(conf: StratusConfig) -> ServerTls | None:
    """``stratus zookeeper``'s TLS port: ``zookeeper.server.secure.port``, its stores, and
    ``zookeeper.server.ssl.quorum`` (an ensemble's members talk over TLS too)."""
    if conf.zookeeper_server_secure_port is None:
        return None
    keystore = conf.zookeeper_server_ssl_keystore_file
    if not keystore:
        raise ConfigError(
            "zookeeper.server.secure.port is set but zookeeper.server.ssl.keystore.file is "
            "not: give the PEM file of the server's key and certificate"
        )
    truststore = conf.zookeeper_server_ssl_truststore_file
    return ServerTls(
        port=conf.zookeeper_server_secure_port,
        keystore=Path(keystore),
        truststore=Path(truststore) if truststore else None,
        quorum=conf.zookeeper_server_ssl_quorum,
    )


def state_store_settings(
    conf: StratusConfig, *, principal: str | None = None
) -> StateStoreSettings:
    """``cluster.state.store``; a call bounded by the shorter of ``zookeeper.session.timeout.secs``
    and ``supervisor.fence.timeout.secs``. With ``pacemaker``, the client settings of
    ``pacemaker.*``, authenticating as ``principal`` unless pacemaker.auth.principal says
    otherwise (a supervisor passes its id)."""
    pacemaker = None
    if conf.cluster_state_store == "pacemaker":
        pacemaker = pacemaker_client_settings(conf, default_principal=principal)
    return StateStoreSettings(
        kind=conf.cluster_state_store,
        call_timeout_secs=min(
            conf.zookeeper_session_timeout_secs, conf.supervisor_fence_timeout_secs
        ),
        pacemaker=pacemaker,
    )


def pacemaker_server_settings(conf: StratusConfig) -> PacemakerServerSettings:
    """``pacemaker.*`` as a server's settings (``stratus pacemaker``)."""
    return PacemakerServerSettings(
        host=conf.pacemaker_host,
        port=conf.pacemaker_port,
        auth_method=AuthMethod(conf.pacemaker_auth_method),
        auth_file=conf.pacemaker_auth_file,
        auth_insecure=conf.pacemaker_auth_insecure,
        auth_timeout_secs=conf.pacemaker_auth_timeout_secs,
        kerberos=_server_kerberos_settings(conf),
        limits=StoreLimits(
            max_entries=conf.pacemaker_max_entries,
            max_bytes=conf.pacemaker_max_bytes,
            ttl_secs=conf.pacemaker_pulse_ttl_secs,
        ),
        max_frame_bytes=conf.pacemaker_max_frame_bytes,
        max_connections=conf.pacemaker_max_connections,
        idle_timeout_secs=conf.pacemaker_idle_timeout_secs,
        tls=pacemaker_tls(conf),
    )


def _server_kerberos_settings(conf: StratusConfig) -> KerberosServerSettings | None:
    if conf.pacemaker_kerberos_keytab is None:
        return None
    principal = server_principal(conf.pacemaker_kerberos_service_principal, conf.pacemaker_host)
    return KerberosServerSettings(conf.pacemaker_kerberos_keytab, principal)


def pacemaker_client_settings(
    conf: StratusConfig, *, default_principal: str | None = None
) -> PacemakerClientSettings:
    """``pacemaker.*`` as a client's settings; with digest, the secret of
    ``pacemaker.auth.principal`` read from ``pacemaker.auth.file`` (else the line of
    ``default_principal``, else the file's only line). A server whose TTL is not above both
    leader timeouts is reported when the client connects to it."""
    method = AuthMethod(conf.pacemaker_auth_method)
    principal, secret = None, None
    if method is AuthMethod.DIGEST:
        if not conf.pacemaker_auth_file:
            raise PacemakerAuthFileError("pacemaker.auth.method digest needs pacemaker.auth.file")
        secrets = load_secrets(Path(conf.pacemaker_auth_file))
        chosen = _client_secret(secrets, conf, default_principal)
        principal, secret = chosen.principal.name, chosen.secret
    return PacemakerClientSettings(
        servers=parse_servers(conf.pacemaker_servers, conf.pacemaker_port),
        auth_method=method,
        principal=principal,
        secret=secret,
        kerberos=KerberosClientSettings(
            conf.pacemaker_kerberos_service_principal, conf.pacemaker_auth_principal
        ),
        max_frame_bytes=conf.pacemaker_max_frame_bytes,
        timeout_secs=conf.pacemaker_client_timeout_secs,
        tls=pacemaker_tls(conf),
        min_pulse_ttl_secs=max(conf.nimbus_supervisor_timeout_secs, conf.nimbus_task_timeout_secs),
    )


def _client_secret(
    secrets: dict[str, Secret], conf: StratusConfig, default_principal: str | None
) -> Secret:
    name = conf.pacemaker_auth_principal
    if name is None and default_principal in secrets:
        name = default_principal
    if name is None:
        if len(secrets) != 1:
            raise PacemakerAuthFileError(
                f"{conf.pacemaker_auth_file} lists {len(secrets)} principals: set "
                "pacemaker.auth.principal to the one to use"
            )
        return next(iter(secrets.values()))
    if name not in secrets:
        raise PacemakerAuthFileError(
            f"pacemaker.auth.principal {name!r} is not in {conf.pacemaker_auth_file}: add its "
            "line, or set pacemaker.auth.principal to a principal the file holds"
        )
    return secrets[name]


def pacemaker_tls(conf: StratusConfig) -> TlsSettings | None:
    """``pacemaker.tls.*``: a server's certificate, the CA its clients verify it against."""
    if not (conf.pacemaker_tls_cert or conf.pacemaker_tls_ca):
        return None
    return TlsSettings(
        cert=conf.pacemaker_tls_cert,
        key=conf.pacemaker_tls_key,
        ca=conf.pacemaker_tls_ca,
        require_client_cert=conf.pacemaker_tls_client_cert_required,
    )


def distributor_settings(conf: StratusConfig) -> DistributorSettings:
    """``nimbus.code.distributor`` and its store; how copies are fetched."""
    return DistributorSettings(
        kind=conf.nimbus_code_distributor,
        shared_url=conf.nimbus_code_shared_url,
        fetch=FetchSettings(
            parts=conf.nimbus_code_download_parts,
            part_min_bytes=conf.nimbus_code_download_part_min_bytes,
            timeout=conf.client_request_timeout_secs,
            connect_timeout=conf.nimbus_code_download_connect_timeout_secs,
            auth=client_auth(conf),
        ),
    )


def server_tls(conf: StratusConfig) -> TlsSettings | None:
    """``nimbus.tls.*``: the TLS of a nimbus's API and package server; None for plain http."""
    if not conf.nimbus_tls_cert:
        return None
    return TlsSettings(
        cert=conf.nimbus_tls_cert,
        key=conf.nimbus_tls_key,
        ca=conf.nimbus_tls_ca,
        require_client_cert=conf.nimbus_tls_client_cert_required,
    )


def http_bounds(conf: StratusConfig) -> HttpBounds:
    """``nimbus.http.*``: the bounds of a nimbus's API, a supervisor's endpoint and the zkfc's
    endpoint."""
    return HttpBounds(
        max_connections=conf.nimbus_http_max_connections,
        header_timeout_secs=conf.nimbus_http_header_timeout_secs,
        keepalive_secs=conf.nimbus_http_keepalive_secs,
        max_header_bytes=conf.nimbus_http_max_header_bytes,
        max_per_address=conf.nimbus_http_max_connections_per_address,
        linger_secs=conf.nimbus_http_linger_secs,
        linger_max_bytes=conf.nimbus_http_linger_max_bytes,
    )


def access_policy(conf: StratusConfig, *, fixed: Credentials | None = None) -> AccessPolicy:
    """``nimbus.auth.tokens.file``: who may call a nimbus, a supervisor's endpoint or a
    zkfc's endpoint (everyone when it is not set); ``reload`` reads the file again. ``fixed``
    entries are known beside the file's (a supervised nimbus's controller), never instead."""
    if not conf.nimbus_auth_tokens_file:
        return AccessPolicy()
    path = Path(conf.nimbus_auth_tokens_file)
    return AccessPolicy(load_credentials(path), source=path, fixed=fixed)


def audit_log(conf: StratusConfig) -> None:
    """``audit.log.file``: where the daemon's audit trail goes (``configure_audit_log``);
    ConfigError naming the file when it cannot be opened."""
    try:
        configure_audit_log(conf.audit_log_file)
    except OSError as exc:
        raise ConfigError(
            f"cannot open audit.log.file {conf.audit_log_file}: {exc.strerror or exc}; create "
            "its directory, writable by the daemon's user"
        ) from None


def log_settings(conf: StratusConfig) -> LogSettings:
    """``log.level`` and ``log.format``: how a daemon logs."""
    return LogSettings(
        level=logging.getLevelNamesMapping()[conf.log_level.upper()],
        format=LogFormat(conf.log_format),
    )


def history_settings(conf: StratusConfig) -> TrailSettings:
    """``history.file``: where a daemon and its workers record their history (if anywhere)."""
    return TrailSettings(Path(conf.history_file) if conf.history_file else None)
