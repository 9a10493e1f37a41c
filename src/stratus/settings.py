"""The settings of stratus's library layers, read from the configuration in one place.

The layers below the daemons (ZooKeeper, the election library, the state store, code
distribution) never read the configuration: they take small settings records, and this
module is where the configuration's keys become those records. The daemons' own settings
are built beside them (``nimbus/settings.py``, ``supervisor/settings.py``) from these::

    session = ZkSession(zk_settings(conf))
    store = create_state_store(state_store_settings(conf), session.client, paths)
    check_package(path, package_limits(conf))
    create_distributor(distributor_settings(conf), client=session.client, ...)
"""

from __future__ import annotations

from pathlib import Path

from stratus.codedist.factory import DistributorSettings
from stratus.codedist.package_check import PackageLimits
from stratus.codedist.transfer.fetch import FetchSettings
from stratus.config import StratusConfig
from stratus.errors import ConfigError
from stratus.state.factory import StateStoreSettings
from stratus.zk.auth import AuthScheme, ServerAuth, ZkAuth, read_credentials, super_digest
from stratus.zk.session import ZkSettings
from stratus.zk.tls import ServerTls, ZkTls


def zk_settings(conf: StratusConfig) -> ZkSettings:
    """``zookeeper.servers``, ``.root``, ``.session.timeout.secs``, ``.connection.timeout.secs``
    and ``zookeeper.auth.*`` (whose credentials file is read here, once)."""
    return ZkSettings(
        hosts=conf.zookeeper_hosts(),
        root=conf.zookeeper_root,
        session_timeout=conf.zookeeper_session_timeout_secs,
        connection_timeout=conf.zookeeper_connection_timeout_secs,
        auth=zk_auth(conf),
        tls=ZkTls(
            enabled=conf.zookeeper_ssl_enabled,
            ca_file=conf.zookeeper_ssl_ca_file,
            cert_file=conf.zookeeper_ssl_cert_file,
            key_file=conf.zookeeper_ssl_key_file,
            check_hostname=conf.zookeeper_ssl_check_hostname,
        ),
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


def zk_server_auth(conf: StratusConfig) -> ServerAuth:
    """What ``stratus zookeeper`` demands: ``zookeeper.server.auth.required``, ``.super.file``,
    ``.sasl.jaas.file``."""
    path = conf.zookeeper_server_super_file
    jaas = conf.zookeeper_server_sasl_jaas_file
    return ServerAuth(
        required=conf.zookeeper_server_auth_required,
        super_digest=super_digest(Path(path)) if path else None,
        jaas_file=Path(jaas) if jaas else None,
    )


def zk_server_tls(conf: StratusConfig) -> ServerTls | None:
    """``stratus zookeeper``'s TLS port: ``zookeeper.server.secure.port`` and its stores."""
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
    )


def state_store_settings(conf: StratusConfig) -> StateStoreSettings:
    """``cluster.state.store``; a call bounded by the shorter of ``zookeeper.session.timeout.secs``
    and ``supervisor.fence.timeout.secs``."""
    return StateStoreSettings(
        kind=conf.cluster_state_store,
        call_timeout_secs=min(
            conf.zookeeper_session_timeout_secs, conf.supervisor_fence_timeout_secs
        ),
    )


def package_limits(conf: StratusConfig) -> PackageLimits:
    """``nimbus.max.upload.bytes`` and ``package.max.*``: what a package may be."""
    return PackageLimits(
        max_bytes=conf.nimbus_max_upload_bytes,
        max_unpacked_bytes=conf.package_max_unpacked_bytes,
        max_ratio=conf.package_max_ratio,
        max_entries=conf.package_max_entries,
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
        ),
    )
