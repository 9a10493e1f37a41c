"""The code distributor that ``nimbus.code.distributor`` names, with its settings.

The one place in ``codedist`` that reads the configuration: the distributors take explicit
parameters and small settings objects (``FetchSettings``).
"""

from __future__ import annotations

from collections.abc import Callable

from kazoo.client import KazooClient

from stratus.codedist.distributor import CodeDistributor
from stratus.codedist.local_fs import LocalFileSystemDistributor
from stratus.codedist.package_store import PackageStore
from stratus.codedist.shared_fs import SharedStorageDistributor
from stratus.codedist.transfer.fetch import FetchSettings
from stratus.config import StratusConfig
from stratus.zk.paths import ClusterPaths


def create_distributor(
    conf: StratusConfig,
    *,
    client: KazooClient,
    paths: ClusterPaths,
    address: str,
    store: PackageStore,
    live_nimbuses: Callable[[], int],
    served_from: str | None = None,
) -> CodeDistributor:
    """``local`` keeps code in ``store`` and replicates it; ``shared`` uses one fsspec store.

    ``served_from``: the package server of a nimbus (``local`` names it in registrations).
    """
    if conf.nimbus_code_distributor == "shared":
        assert conf.nimbus_code_shared_url is not None  # checked when the config was loaded
        return SharedStorageDistributor(conf.nimbus_code_shared_url, live_nimbuses=live_nimbuses)
    return LocalFileSystemDistributor(
        client,
        paths,
        address,
        store,
        fetch_settings(conf),
        served_from=served_from,
    )


def fetch_settings(conf: StratusConfig) -> FetchSettings:
    """How copies are fetched: ``nimbus.code.download.*``, ``client.request.timeout.secs``."""
    return FetchSettings(
        parts=conf.nimbus_code_download_parts,
        part_min_bytes=conf.nimbus_code_download_part_min_bytes,
        timeout=conf.client_request_timeout_secs,
    )
