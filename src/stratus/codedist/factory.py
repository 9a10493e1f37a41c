"""The code distributor that its settings name: ``local`` or ``shared``.

The distributors take explicit parameters and small settings records; the configuration's
keys become a ``DistributorSettings`` in ``stratus.settings``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from kazoo.client import KazooClient

from stratus.codedist.distributor import CodeDistributor
from stratus.codedist.local_fs import LocalFileSystemDistributor
from stratus.codedist.package_store import PackageStore
from stratus.codedist.shared_fs import SharedStorageDistributor
from stratus.codedist.transfer.fetch import FetchSettings
from stratus.zk.paths import ClusterPaths


@dataclass(frozen=True)
class DistributorSettings:
    """Which distributor (``nimbus.code.distributor``), its shared store, how copies are fetched."""

    kind: Literal["local", "shared"]
    shared_url: str | None  # nimbus.code.shared.url: required (checked at load) for "shared"
    fetch: FetchSettings


def create_distributor(
    settings: DistributorSettings,
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
    if settings.kind == "shared":
        assert settings.shared_url is not None  # checked when the config was loaded
        return SharedStorageDistributor(settings.shared_url, live_nimbuses=live_nimbuses)
    return LocalFileSystemDistributor(
        client, paths, address, store, settings.fetch, served_from=served_from
    )
