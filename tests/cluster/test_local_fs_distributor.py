"""The local file-system code distributor: several "nimbuses" on one real ZooKeeper.

Each nimbus here is a distributor with its own kazoo client, its own store directory and its
own real HTTP server of the code routes; sessions are expired the way ZooKeeper's own tests
do it (a second client takes the session over and closes it).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from stratus.api.records import PipelineRecord, PipelineStatus
from stratus.codedist.code_sync import CodeSync
from stratus.codedist.distributor import CodeDistributor, CodeMeta
from stratus.codedist.errors import CodeUnavailableError
from stratus.codedist.local_fs import LocalFileSystemDistributor
from stratus.codedist.package_store import PackageStore
from stratus.codedist.transfer.fetch import FetchSettings
from stratus.codedist.transfer.server import PackageServer
from stratus.zk.paths import ClusterPaths
from stratus.zk.server import ZooKeeperServer
from tests.harness.code_server import CodeServer, code_server
from tests.harness.zkfixtures import kazoo_client, wait_until

MIB = 1 << 20
SESSION_SECS = 4.0
WAIT_SECS = 15.0
PATHS = ClusterPaths("/stratus")
DATA = os.urandom(2 * MIB + 99)
META = CodeMeta(hashlib.sha256(DATA).hexdigest(), len(DATA))
OTHER = b"other code " * 1000
OTHER_META = CodeMeta(hashlib.sha256(OTHER).hexdigest(), len(OTHER))


@dataclass
class Nimbus:
    name: str
    client: Any
    store: PackageStore
    server: CodeServer
    dist: LocalFileSystemDistributor
    changes: threading.Event = field(default_factory=threading.Event)

    @property
    def address(self) -> str:
        return self.server.address

    def package(self, data: bytes = DATA) -> Path:
        """A validated upload in this nimbus's store, as the submit path leaves it."""
        path = self.store.directory / f".upload-{self.name}.tmp"
        path.write_bytes(data)
        return path

    def corrupt(self, digest: str) -> None:
        path = self.store.path(digest)
        data = bytearray(path.read_bytes())
        data[7] ^= 0xFF
        path.write_bytes(bytes(data))

    def registration(self, pipeline: str) -> dict[str, Any] | None:
        path = PATHS.code_holder(pipeline, self.address)
        if not self.client.exists(path):
            return None
        data, _ = self.client.get(path)
        return dict(json.loads(data))


@pytest.fixture
def nimbuses(zk_hosts: str, tmp_path: Path) -> Iterator[list[Nimbus]]:
    """Three nimbuses, their distributors prepared."""
    with contextlib.ExitStack() as stack:
        running = [start_nimbus(stack, zk_hosts, tmp_path, name) for name in "abc"]
        yield running
        for nimbus in running:
            nimbus.dist.close()
            nimbus.server.stop_soon()


def start_nimbus(
    stack: contextlib.ExitStack,
    hosts: str,
    tmp_path: Path,
    name: str,
    *,
    package_server: bool = False,
) -> Nimbus:
    """A nimbus's distributor, with its API's code route (and a package server if asked)."""
    client = stack.enter_context(kazoo_client(hosts, session_timeout=SESSION_SECS))
    store = PackageStore(tmp_path / name, max_bytes=64 * MIB)
    server = stack.enter_context(code_server(store))
    served_from = None
    if package_server:
        packages = PackageServer(store, "127.0.0.1", 0)
        packages.start()
        stack.callback(packages.close)
        served_from = packages.address
    dist = LocalFileSystemDistributor(
        client,
        PATHS,
        server.address,
        store,
        FetchSettings(parts=2, part_min_bytes=MIB, timeout=10.0),
        served_from=served_from,
    )
    dist.prepare()
    nimbus = Nimbus(name, client, store, server, dist)
    dist.on_change(nimbus.changes.set)
    return nimbus


def expire_session(client: KazooClient, hosts: str) -> None:
    """Expire ``client``'s session: a second client takes it over, then closes it."""
    session_id, password = client.client_id
    intruder = KazooClient(hosts=hosts, client_id=(session_id, password), timeout=SESSION_SECS)
    intruder.start(timeout=10)
    intruder.stop()
    intruder.close()


def registered_in_new_session(nimbus: Nimbus, pipelines: list[str], old_session: int) -> bool:
    """Whether each registration of ``nimbus`` is back, owned by a session after ``old_session``."""
    session = nimbus.client.client_id
    if session is None or session[0] == old_session:
        return False
    replies = [
        nimbus.client.exists_async(PATHS.code_holder(pipeline, nimbus.address))
        for pipeline in pipelines
    ]
    stats = [reply.get() for reply in replies]
    return all(stat is not None and stat.owner_session_id == session[0] for stat in stats)


def counts(nimbuses: list[Nimbus], pipeline: str, meta: CodeMeta) -> list[int]:
    return [n.dist.replication_count(pipeline, meta) for n in nimbuses]


def test_it_is_a_code_distributor(nimbuses):
    dist: CodeDistributor = nimbuses[0].dist
    assert dist.held() == {}


def test_an_upload_makes_its_nimbus_the_one_holder(nimbuses):
    a = nimbuses[0]
    meta = a.dist.upload(a.package(), "etl")

    assert meta == META
    assert a.store.path(META.digest).read_bytes() == DATA
    assert a.registration("etl") == {"digest": META.digest, "size_bytes": META.size_bytes}
    assert a.dist.held() == {"etl": META}
    assert a.dist.holds("etl", META)
    wait_until(lambda: counts(nimbuses, "etl", META) == [1, 1, 1], WAIT_SECS, "every view: 1")


def test_an_upload_moves_the_received_file_into_the_store(nimbuses):
    a = nimbuses[0]
    package = a.package()
    a.dist.upload(package, "etl")
    assert not package.exists()
    assert sorted(p.name for p in a.store.directory.iterdir()) == [f"{META.digest}.pkg"]


def test_an_upload_from_elsewhere_is_copied(nimbuses, tmp_path):
    a = nimbuses[0]
    package = tmp_path / "etl.zip"
    package.write_bytes(DATA)
    assert a.dist.upload(package, "etl") == META
    assert package.read_bytes() == DATA
    assert a.store.path(META.digest).read_bytes() == DATA


def test_a_standby_replicates_and_the_count_grows(nimbuses):
    a, b, _ = nimbuses
    a.dist.upload(a.package(), "etl")
    wait_until(lambda: b.dist.replication_count("etl", META) == 1, WAIT_SECS, "b sees a")
    b.changes.clear()

    b.dist.replicate("etl", META)

    assert hashlib.sha256(b.store.path(META.digest).read_bytes()).hexdigest() == META.digest
    assert b.dist.holds("etl", META)
    assert a.server.recorder.ranges(), "b did not fetch from a"
    wait_until(lambda: counts(nimbuses, "etl", META) == [2, 2, 2], WAIT_SECS, "every view: 2")
    wait_until(b.changes.is_set, WAIT_SECS, "b's on_change callback (its own registration)")


def test_a_holder_that_names_its_package_server_is_fetched_from_there(zk_hosts, tmp_path):
    with contextlib.ExitStack() as stack:
        a = start_nimbus(stack, zk_hosts, tmp_path, "a", package_server=True)
        b = start_nimbus(stack, zk_hosts, tmp_path, "b")
        stack.callback(a.dist.close)
        stack.callback(b.dist.close)
        a.dist.upload(a.package(), "etl")
        wait_until(lambda: b.dist.replication_count("etl", META) == 1, WAIT_SECS, "b sees a")

        b.dist.replicate("etl", META)

        assert b.store.path(META.digest).read_bytes() == DATA
        named = {"digest": META.digest, "size_bytes": META.size_bytes}
        assert a.registration("etl") == {**named, "served_from": a.dist.served_from}
        assert b.registration("etl") == named  # b runs no package server
        assert a.server.recorder.ranges() == [], "b fetched from a's API, not its package server"


def test_large_code_comes_in_parts_from_two_holders(nimbuses):
    a, b, c = nimbuses
    a.dist.upload(a.package(), "etl")
    b.dist.upload(b.package(), "etl")
    wait_until(lambda: c.dist.replication_count("etl", META) == 2, WAIT_SECS, "c sees a and b")

    c.dist.replicate("etl", META)

    assert c.store.path(META.digest).read_bytes() == DATA
    assert len(a.server.recorder.ranges()) == 1
    assert len(b.server.recorder.ranges()) == 1
    assert a.server.recorder.ranges()[0] != b.server.recorder.ranges()[0]


def test_a_corrupt_copy_is_unregistered_and_fetched_again(nimbuses):
    a, b, _ = nimbuses
    a.dist.upload(a.package(), "etl")
    wait_until(lambda: b.dist.replication_count("etl", META) == 1, WAIT_SECS, "b sees a")
    b.dist.replicate("etl", META)
    wait_until(lambda: a.dist.replication_count("etl", META) == 2, WAIT_SECS, "a sees b")

    b.corrupt(META.digest)

    assert not b.dist.holds("etl", META)
    assert not b.store.has(META.digest)
    assert b.dist.held() == {}
    assert b.registration("etl") is None
    wait_until(lambda: counts(nimbuses, "etl", META) == [1, 1, 1], WAIT_SECS, "every view: 1")

    b.dist.replicate("etl", META)

    assert b.dist.holds("etl", META)
    wait_until(lambda: counts(nimbuses, "etl", META) == [2, 2, 2], WAIT_SECS, "every view: 2")


def test_replicate_uses_a_verified_local_copy_without_fetching(nimbuses):
    a, b, _ = nimbuses
    b.dist.upload(b.package(), "first")
    b.dist.replicate("etl", META)  # the same bytes: nobody holds "etl", b needs no holder
    assert b.dist.held() == {"first": META, "etl": META}
    assert b.registration("etl") == {"digest": META.digest, "size_bytes": META.size_bytes}
    assert a.server.recorder.ranges() == []


def test_replicate_without_any_holder_is_unavailable(nimbuses):
    a = nimbuses[0]
    with pytest.raises(CodeUnavailableError, match=META.digest):
        a.dist.replicate("etl", META)
    assert a.dist.held() == {}
    assert a.registration("etl") is None


def test_cleanup_deletes_the_file_and_the_registration(nimbuses):
    a, b, _ = nimbuses
    a.dist.upload(a.package(), "etl")
    wait_until(lambda: b.dist.replication_count("etl", META) == 1, WAIT_SECS, "b sees a")
    b.dist.replicate("etl", META)
    wait_until(lambda: a.dist.replication_count("etl", META) == 2, WAIT_SECS, "a sees b")

    b.dist.cleanup("etl")

    assert not b.store.has(META.digest)
    assert b.registration("etl") is None
    assert b.dist.held() == {}
    wait_until(lambda: counts(nimbuses, "etl", META) == [1, 1, 1], WAIT_SECS, "every view: 1")


def test_a_cleanup_of_an_old_digest_leaves_a_registration_made_since(nimbuses):
    """A drop decided for the old code of a key (an applied update's staged key) must not
    drop the new code registered under the same key meanwhile (two updates in a row)."""
    a = nimbuses[0]
    a.dist.upload(a.package(), "etl.update")
    a.dist.upload(a.package(OTHER), "etl.update")  # registered since the drop was decided

    a.dist.cleanup("etl.update", META.digest)

    assert a.dist.held() == {"etl.update": OTHER_META}
    assert a.registration("etl.update") == {
        "digest": OTHER_META.digest,
        "size_bytes": len(OTHER),
    }
    assert a.store.has(OTHER_META.digest)
    a.dist.cleanup("etl.update", OTHER_META.digest)
    assert a.dist.held() == {} and not a.store.has(OTHER_META.digest)


def test_code_shared_by_two_pipelines_is_deleted_once_neither_holds_it(nimbuses):
    a = nimbuses[0]
    a.dist.upload(a.package(), "one")
    a.dist.upload(a.package(), "two")

    a.dist.cleanup("one")
    a.dist.purge(META.digest)
    assert a.store.has(META.digest), "deleted while 'two' still holds it"
    assert a.registration("one") is None
    assert a.dist.holds("two", META)

    a.dist.cleanup("two")
    assert not a.store.has(META.digest)


def test_purge_deletes_a_package_no_pipeline_holds(nimbuses):
    a = nimbuses[0]
    with a.package().open("rb") as package:
        a.store.put(package)  # stored, never registered
    assert a.store.has(META.digest)
    a.dist.purge(META.digest)
    assert not a.store.has(META.digest)


def test_a_pipeline_submitted_again_with_other_code_replaces_its_registration(nimbuses):
    a, b, _ = nimbuses
    a.dist.upload(a.package(), "etl")
    wait_until(lambda: b.dist.replication_count("etl", META) == 1, WAIT_SECS, "b sees etl")

    a.dist.upload(a.package(OTHER), "etl")

    assert a.registration("etl") == {"digest": OTHER_META.digest, "size_bytes": len(OTHER)}
    assert a.dist.held() == {"etl": OTHER_META}
    assert a.store.digests() == {OTHER_META.digest}, "the replaced code is still stored"
    wait_until(
        lambda: (
            (
                b.dist.replication_count("etl", META),
                b.dist.replication_count("etl", OTHER_META),
            )
            == (0, 1)
        ),
        WAIT_SECS,
        "b sees the new digest (a data watch)",
    )


def test_download_fetches_verified_code_into_a_directory(nimbuses, tmp_path):
    a, _, c = nimbuses
    a.dist.upload(a.package(), "etl")
    wait_until(lambda: c.dist.replication_count("etl", META) == 1, WAIT_SECS, "c sees a")

    from_holder = a.dist.download(tmp_path / "sup-1", "etl", META)
    fetched = c.dist.download(tmp_path / "sup-2", "etl", META)

    for files, directory in ((from_holder, "sup-1"), (fetched, "sup-2")):
        assert files == [tmp_path / directory / f"{META.digest}.pkg"]
        assert files[0].read_bytes() == DATA
        assert sorted(p.name for p in (tmp_path / directory).iterdir()) == [files[0].name]
    assert c.dist.held() == {}, "a download does not make a holder"


def test_a_failed_download_leaves_nothing_in_the_directory(nimbuses, tmp_path):
    a, _, c = nimbuses
    a.dist.upload(a.package(), "etl")
    wait_until(lambda: c.dist.replication_count("etl", META) == 1, WAIT_SECS, "c sees a")
    a.corrupt(META.digest)
    with pytest.raises(CodeUnavailableError, match=a.address):
        c.dist.download(tmp_path / "sup", "etl", META)
    assert list((tmp_path / "sup").iterdir()) == []


def test_registrations_and_watches_come_back_after_a_session_expiry(nimbuses, zk_hosts):
    a, b, _ = nimbuses
    a.dist.upload(a.package(), "etl")
    wait_until(lambda: b.dist.replication_count("etl", META) == 1, WAIT_SECS, "b sees a")
    b.dist.replicate("etl", META)
    b.dist.upload(b.package(OTHER), "other")
    old_session = b.client.client_id[0]

    expire_session(b.client, zk_hosts)

    wait_until(
        lambda: registered_in_new_session(b, ["etl", "other"], old_session),
        WAIT_SECS,
        "b's registrations in its new session",
    )
    wait_until(lambda: a.dist.replication_count("etl", META) == 2, WAIT_SECS, "a sees b again")

    # b's watches were set again: it sees a change made after the expiry.
    a.dist.upload(a.package(OTHER), "new")
    wait_until(lambda: b.dist.replication_count("new", OTHER_META) == 1, WAIT_SECS, "b sees 'new'")
    a.dist.cleanup("etl")
    wait_until(lambda: b.dist.replication_count("etl", META) == 1, WAIT_SECS, "b sees a leave")


@pytest.mark.slow
@pytest.mark.solo
def test_hundreds_of_registrations_come_back_after_an_expiry_with_one_thread(nimbuses, zk_hosts):
    a = nimbuses[0]
    names = [f"p{i:03d}" for i in range(300)]
    a.dist.upload(a.package(), names[0])
    for name in names[1:]:
        a.dist.replicate(name, META)  # a verified local copy: registered, nothing fetched
    threads_before = len(threading.enumerate())
    old_session = a.client.client_id[0]

    expire_session(a.client, zk_hosts)

    wait_until(
        lambda: registered_in_new_session(a, names, old_session),
        WAIT_SECS,
        "all 300 registrations in the new session",
    )
    wait_until(
        lambda: all(n.dist.replication_count(name, META) == 1 for n in nimbuses for name in names),
        WAIT_SECS,
        "every view to count each pipeline once",
    )
    threads = [t.name for t in threading.enumerate()]
    assert threads.count(f"code-registrations {a.address}") == 1
    assert not [name for name in threads if name.startswith("ephemeral")]
    assert len(threads) < threads_before + 10, "a thread per registration?"


def test_close_unregisters_everything(nimbuses):
    a, b, _ = nimbuses
    a.dist.upload(a.package(), "etl")
    wait_until(lambda: b.dist.replication_count("etl", META) == 1, WAIT_SECS, "b sees a")
    a.dist.close()
    assert a.registration("etl") is None
    wait_until(lambda: b.dist.replication_count("etl", META) == 0, WAIT_SECS, "b sees a leave")


def test_a_registration_made_while_zookeeper_is_down_appears_once_it_is_back(
    zk_restartable: ZooKeeperServer, tmp_path
):
    with contextlib.ExitStack() as stack:
        a = start_nimbus(stack, zk_restartable.connect_string, tmp_path, "a")
        a.dist.upload(a.package(), "first")
        zk_restartable.stop()
        wait_until(lambda: not a.client.connected, WAIT_SECS, "the client to notice")

        a.dist.replicate("etl", META)  # a verified local copy: only the registration is due

        assert a.dist.held() == {"first": META, "etl": META}
        zk_restartable.start()
        wait_until(
            lambda: a.client.connected and a.registration("etl") is not None,
            WAIT_SECS,
            "the deferred registration",
        )
        assert a.registration("first") is not None
        a.dist.close()


def test_a_standby_awaits_an_upload_in_progress_and_warns_only_of_unreachable_code(
    nimbuses, caplog
):
    """A submit is recorded before its nimbus registers the code: a standby's sync says once
    (INFO) that it waits for that upload, with no warning, and fetches the code once it is
    registered; code registered by a holder it cannot reach is a warning."""
    a, b, _ = nimbuses
    records = {"etl": _record("etl", META)}
    sync = CodeSync(b.dist, lambda: records, records.get, freq_secs=60, lost_fail_secs=300)
    caplog.set_level(logging.INFO, logger="stratus.codedist")

    assert not sync.sync_once()
    assert not sync.sync_once()

    awaited = [r for r in caplog.records if "event=code_upload_awaited" in r.getMessage()]
    assert [r.levelno for r in awaited] == [logging.INFO]  # once, however many rounds
    assert "pipeline=etl" in awaited[0].getMessage()
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []

    a.dist.upload(a.package(), "etl")  # the submit's upload ends
    wait_until(lambda: b.dist.replication_count("etl", META) == 1, WAIT_SECS, "b sees a")
    assert sync.sync_once() and b.dist.holds("etl", META)

    caplog.clear()
    records["other"] = _record("other", OTHER_META)
    registration = {"digest": OTHER_META.digest, "size_bytes": OTHER_META.size_bytes}
    dead = "127.0.0.1:9"  # nothing listens there
    a.client.create(
        PATHS.code_holder("other", dead),
        json.dumps(registration).encode(),
        ephemeral=True,
        makepath=True,
    )
    wait_until(lambda: b.dist.replication_count("other", OTHER_META) == 1, WAIT_SECS, "b sees it")

    assert not sync.sync_once()

    failed = [r for r in caplog.records if "event=code_fetch_failed" in r.getMessage()]
    assert failed and all(r.levelno == logging.WARNING for r in failed)
    assert not [r for r in caplog.records if "event=code_upload_awaited" in r.getMessage()]


def _record(name: str, meta: CodeMeta) -> PipelineRecord:
    return PipelineRecord(
        name=name,
        status=PipelineStatus.PENDING,
        digest=meta.digest,
        size_bytes=meta.size_bytes,
        submitted=0.0,
        updated=0.0,
        epoch=1,
    )
