"""The nimbus's code side, built and opened at start: the package store, its server, the
code distributor, the code sync and the submit path.

The store receives uploads in ``nimbus.local.dir`` (or the cluster's default directory,
``local_dir.py``), and with the ``local`` distributor keeps the code; with
``nimbus.code.port`` a package server serves its packages to the other nimbuses and the
supervisors. Each part opened notes its close on the daemon's stack (``opened``), so that a
failed start or a stop closes it, newest first; a directory, port or distributor that
cannot be used is a ``NimbusStartError`` that names it. The code sync is built, not
started: the daemon starts it once it follows the cluster::

    code = open_code(settings, opened, client=client, ops=ops, view=view, paths=paths,
                     address="n1:6627", port=6627, tls=None, clock=time.monotonic)
    code.sync.start()                    # holds the code of every pipeline that needs it
    code.submitter.submit(term, ...)     # an upload into code.store, handed to code.distributor
"""

from __future__ import annotations

import ssl
from contextlib import ExitStack
from dataclasses import dataclass

from kazoo.client import KazooClient

from stratus.api.clock import Clock
from stratus.codedist.code_sync import CodeSync
from stratus.codedist.distributor import CodeDistributor
from stratus.codedist.factory import create_distributor
from stratus.codedist.package_store import PackageStore
from stratus.codedist.transfer.server import PackageServer
from stratus.errors import StratusError
from stratus.nimbus.cluster_view import ClusterView
from stratus.nimbus.http.listening import NimbusStartError, package_port_error
from stratus.nimbus.local_dir import default_local_dir, mark_cluster
from stratus.nimbus.records.pipeline_ops import PipelineOps
from stratus.nimbus.settings import NimbusSettings
from stratus.nimbus.submission import Submitter
from stratus.zk.paths import ClusterPaths


@dataclass(frozen=True)
class NimbusCode:
    """The code side of one nimbus, open (``open_code``)."""

    store: PackageStore  # receives uploads; with the local distributor, keeps the code
    server: PackageServer | None  # None: nimbus.code.port unset, code not served
    distributor: CodeDistributor  # nimbus.code.distributor
    sync: CodeSync  # not started yet
    submitter: Submitter


def open_code(  # noqa: PLR0913 keyword-only: the daemon's collaborators
    settings: NimbusSettings,
    opened: ExitStack,
    *,
    client: KazooClient,
    ops: PipelineOps,
    view: ClusterView,
    paths: ClusterPaths,
    address: str,
    port: int,
    tls: ssl.SSLContext | None,
    clock: Clock,
) -> NimbusCode:
    """Open the store, its server and the distributor (their closes noted on ``opened``),
    and build the code sync and the submitter over them."""
    store = package_store(settings, port)
    server = start_package_server(settings, store, opened, tls=tls)
    distributor = create_distributor(
        settings.distributor,
        client=client,
        paths=paths,
        address=address,
        store=store,
        live_nimbuses=lambda: len(view.nimbuses()),
        served_from=server.address if server is not None else None,
    )
    opened.callback(distributor.close)
    try:
        distributor.prepare()
    except StratusError as exc:
        raise NimbusStartError(f"cannot start the code distributor: {exc}") from None
    sync = CodeSync(
        distributor,
        view.pipelines,
        ops.read,
        freq_secs=settings.code_sync_freq_secs,
        lost_fail_secs=settings.code_lost_fail_secs,
        clock=clock,
    )
    submitter = Submitter(ops, store, distributor, settings.submit)
    return NimbusCode(store, server, distributor, sync, submitter)


def package_store(settings: NimbusSettings, port: int) -> PackageStore:
    """The store that receives uploads (and, with the local distributor, keeps code), its
    leftovers of a previous run removed."""
    configured = settings.local_dir.configured
    local_dir = configured or default_local_dir(settings.local_dir, settings.api.host, port)
    try:
        store = PackageStore(
            local_dir / "packages",
            max_bytes=settings.service.limits.max_upload_bytes,
        )
        if configured is None:
            mark_cluster(local_dir, settings.local_dir.cluster)
    except OSError as exc:
        raise NimbusStartError(f"cannot use nimbus.local.dir {local_dir}: {exc.strerror}") from None
    store.remove_leftovers()
    return store


def start_package_server(
    settings: NimbusSettings,
    store: PackageStore,
    opened: ExitStack,
    *,
    tls: ssl.SSLContext | None,
) -> PackageServer | None:
    """Serve the store's packages with sendfile, if code is copied between nimbuses
    (``nimbus.code.port``); None if not."""
    port = settings.code_port
    if port is None:
        return None
    bind = settings.api.bind
    try:
        server = PackageServer(
            store,
            bind,
            port,
            advertised_host=settings.api.host,
            policy=settings.api.policy,
            tls=tls,
            bounds=settings.code_server,
        )
    except OSError as exc:
        raise package_port_error(bind, port, exc) from None
    opened.callback(server.close)
    server.start()
    return server
