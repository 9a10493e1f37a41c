"""Checkpoints, packages and unpacked code are their owner's alone: directories 0700 and
files 0600 on a real file system, whatever the umask, including the parents stratus makes,
while parents that existed keep the operator's mode."""

from __future__ import annotations

import io
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from stratus.api.records import FencingToken
from stratus.codedist.distributor import CodeMeta
from stratus.codedist.package_store import PackageStore
from stratus.codedist.transfer.check import hash_file
from stratus.files import make_private_file, private_dirs
from stratus.supervisor.code_cache import CodeCache, PipelineCode
from stratus.worker.checkpoint_owner import OWNERS_DIR, CheckpointOwners
from stratus.zk.server import ZooKeeperServer
from tests.harness.nimbus_cluster import nimbus_cluster
from tests.harness.package_factory import valid_package
from tests.unit.test_code_cache import LIMITS, CopyDistributor, fetch


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(autouse=True)
def usual_umask() -> Iterator[None]:
    """The umask of most hosts, under which a plain mkdir is 0755 and a file 0644."""
    before = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(before)


def test_private_dirs_makes_every_missing_level_0700_and_leaves_existing_parents(
    tmp_path: Path,
) -> None:
    tmp_path.chmod(0o755)
    made = private_dirs(tmp_path / "a" / "b" / "c")
    assert [mode(p) for p in (made, made.parent, made.parent.parent)] == [0o700] * 3
    assert mode(tmp_path) == 0o755  # the operator's
    existing = tmp_path / "old"
    existing.mkdir(mode=0o755)
    private_dirs(existing)
    assert mode(existing) == 0o700


def test_private_dirs_refuses_a_file_in_its_place(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(NotADirectoryError, match="not a directory"):
        private_dirs(tmp_path / "f")


def test_the_package_store_and_its_packages_are_private(tmp_path: Path) -> None:
    store = PackageStore(tmp_path / "nimbus" / "packages", max_bytes=1 << 20)
    assert mode(tmp_path / "nimbus") == mode(tmp_path / "nimbus" / "packages") == 0o700
    received = store.receive(io.BytesIO(b"uploaded package bytes"))
    uploaded = store.adopt(received.path, received.digest)
    downloaded = store.download_path("0" * 64)
    downloaded.write_bytes(b"a package fetched from another nimbus")  # 0644 by the umask
    fetched = store.adopt(downloaded)
    for package in (uploaded, fetched):
        assert mode(store.path(package.digest)) == 0o600


def test_unpacked_code_is_private_to_the_supervisor(tmp_path: Path) -> None:
    data = valid_package("etl")
    (tmp_path / "p").write_bytes(data)
    meta = CodeMeta(hash_file(tmp_path / "p")[0], len(data))
    cache = CodeCache(CopyDistributor(data), tmp_path / "local" / "code", LIMITS, backoff_secs=1.0)  # type: ignore[arg-type]
    try:
        ready = fetch(cache, meta)
    finally:
        cache.close()
    assert isinstance(ready, PipelineCode)
    assert mode(tmp_path / "local") == mode(tmp_path / "local" / "code") == 0o700
    unpacked = [ready.directory, *ready.directory.rglob("*")]
    assert {p.name: mode(p) for p in unpacked if p.is_dir()} == {
        p.name: 0o700 for p in unpacked if p.is_dir()
    }
    files = {p.name: mode(p) for p in unpacked if p.is_file()}
    assert files and files == dict.fromkeys(files, 0o600)


def test_code_for_workers_of_other_users_is_passable_and_its_downloads_stay_private(
    tmp_path: Path,
) -> None:
    data = valid_package("etl")
    (tmp_path / "p").write_bytes(data)
    meta = CodeMeta(hash_file(tmp_path / "p")[0], len(data))
    code = tmp_path / "local" / "code"
    cache = CodeCache(CopyDistributor(data), code, LIMITS, backoff_secs=1.0, workers_pass=True)  # type: ignore[arg-type]
    try:
        ready = fetch(cache, meta)
    finally:
        cache.close()
    assert isinstance(ready, PipelineCode)
    assert mode(code) == 0o711  # passed through, never listed
    assert mode(code / "packages") == 0o700  # where the distributor downloads
    unpacked = [ready.directory, *ready.directory.rglob("*")]
    assert {mode(p) for p in unpacked if p.is_dir()} == {0o755}
    assert {mode(p) for p in unpacked if p.is_file()} == {0o644}


def test_a_directory_shared_with_its_group_on_purpose_stays_shared(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o2770)  # a supervisor's hand-off to a worker of another user
    opened = tmp_path / "opened"
    opened.mkdir()
    opened.chmod(0o755)
    private_dirs(shared)
    private_dirs(opened)
    assert mode(shared) == 0o2770
    assert mode(opened) == 0o700
    below = private_dirs(shared / "_claims" / "deeper")  # made inside: shared alike
    assert mode(shared / "_claims") == mode(below) == 0o2770
    (below / "claim").write_text("x")
    make_private_file(below / "claim")
    assert mode(below / "claim") == 0o660
    (opened / "claim").write_text("x")
    make_private_file(opened / "claim")
    assert mode(opened / "claim") == 0o600


def test_a_workers_checkpoint_directory_is_made_private_by_the_worker(tmp_path: Path) -> None:
    root = tmp_path / "checkpoints"
    root.mkdir(mode=0o755)  # the operator's root
    location = root / "etl" / "v2"
    owners = CheckpointOwners(str(location), FencingToken(era=1, zxid=5))
    assert owners.claim({"supervisor": "s1"}) is None
    assert mode(root) == 0o755
    assert mode(root / "etl") == mode(location) == mode(location / OWNERS_DIR) == 0o700
    (claim,) = (location / OWNERS_DIR).iterdir()
    assert mode(claim) == 0o600


def test_a_running_nimbus_keeps_its_packages_private(
    zk_server: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> None:
    logs = tmp_path_factory.mktemp("private-nimbus")
    with nimbus_cluster(zk_server.connect_string, logs, "private-nimbus", 1) as cluster:
        nimbus = cluster.nimbuses[0]
        cluster.wait_for_agreed_leader()
        submitted = httpx.post(
            f"{nimbus.url}/api/v1/pipelines",
            data={"name": "private"},
            files={"package": valid_package("private")},
            timeout=30.0,
        )
        assert submitted.status_code == 201, submitted.text
        (package,) = nimbus.local_dir.rglob(f"{submitted.json()['digest']}*")
        assert mode(package) == 0o600
        for level in package.parents:
            if level == nimbus.local_dir:
                break
            assert mode(level) == 0o700, level
