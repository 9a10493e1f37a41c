"""A checkpoint location's origin (``worker/checkpoint_origin.py``) and the names of the
clusters' default directories (``cluster_names.py``): the pure checks, and the files on a
local disk."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from fsspec.implementations.local import LocalFileSystem

from stratus.api.records import ClusterIdentity, FencingToken
from stratus.cluster_names import cluster_dir_name, cluster_root
from stratus.config import config_from_mapping
from stratus.nimbus.local_dir import default_local_dir, mark_cluster
from stratus.nimbus.settings import LocalDirSettings, NimbusSettings
from stratus.worker.checkpoint_origin import (
    CheckpointOrigin,
    adopt_legacy,
    check_origin,
    origin_path,
    origin_problem,
    record_origin,
)
from stratus.worker.checkpoint_owner import OWNERS_DIR, CheckpointOwners
from stratus.worker.outcome import REFUSED_EXIT, Outcome

A = ClusterIdentity.of("zk1:2181,zk2:2181", "/team-a")
B = ClusterIdentity.of("zk1:2181,zk2:2181", "/team-b")
TOKEN = FencingToken(era=1_700_000_000_000, zxid=42)


def test_a_cluster_is_named_by_its_zookeeper_root_and_two_roots_never_share_a_name() -> None:
    assert cluster_root("zk1:2181,zk2:2181/team", "/stratus") == "/team/stratus"
    assert cluster_root("zk1:2181", "stratus/") == "/stratus"
    assert cluster_dir_name("/stratus") == "stratus"
    assert cluster_dir_name("/team/stratus") == "team_stratus"
    roots = ["/a_b", "/a/b", "/a.b", "/a b", "/a-b", "/", "/A/b", "/a__b", "/a/_b"]
    names = {cluster_dir_name(root) for root in roots}
    assert len(names) == len(roots)
    assert cluster_dir_name("/a b").startswith("a-b_")
    assert all(not set(name) & set(":%/.") for name in names)


def test_the_default_directories_are_under_the_clusters_own_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    conf = config_from_mapping({"zookeeper.servers": "zk:2181/x", "zookeeper.root": "/prod"})
    assert conf.cluster_root() == "/x/prod"
    assert conf.checkpoint_root() == str(tmp_path / "stratus-checkpoints.x_prod")
    assert conf.legacy_checkpoint_root() == str(tmp_path / "stratus-checkpoints")
    configured = config_from_mapping({"pipeline.checkpoint.root": "/srv/ck"})
    assert (configured.checkpoint_root(), configured.legacy_checkpoint_root()) == ("/srv/ck", None)


def test_a_nimbus_on_defaults_keeps_the_old_directory_unless_another_cluster_marked_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    ours = local_dir_settings({"zookeeper.root": "/prod", "nimbus.host": "n1"})
    fresh = tmp_path / "stratus-nimbus-n1-6627.prod"
    assert default_local_dir(ours, "n1", 6627) == fresh
    legacy = tmp_path / "stratus-nimbus-n1-6627"
    (legacy / "packages").mkdir(parents=True)
    assert default_local_dir(ours, "n1", 6627) == legacy  # 0.2.0's, unmarked: this cluster's
    mark_cluster(legacy, ours.cluster)
    assert default_local_dir(ours, "n1", 6627) == legacy
    other = local_dir_settings({"zookeeper.root": "/other", "nimbus.host": "n1"})
    assert default_local_dir(other, "n1", 6627) == tmp_path / "stratus-nimbus-n1-6627.other"


def local_dir_settings(values: dict[str, object]) -> LocalDirSettings:
    return NimbusSettings.from_config(config_from_mapping(values)).local_dir


def test_the_origin_check_refuses_another_pipeline_or_another_cluster() -> None:
    ours = CheckpointOrigin.now(A, "etl", TOKEN.era)
    other_era = TOKEN.era + 1
    assert origin_problem(ours, A, "etl", TOKEN.era) is None
    grown = ClusterIdentity.of("zk2:2181,zk3:2181", "/team-a")  # a server added, one removed
    assert origin_problem(ours, grown, "etl", other_era) is None
    other_cluster = origin_problem(ours, B, "etl", other_era)
    assert other_cluster is not None and "root /team-a" in other_cluster
    assert "root /team-b" in other_cluster
    other_pipeline = origin_problem(ours, A, "report", TOKEN.era)
    assert other_pipeline is not None and "pipeline 'etl'" in other_pipeline
    elsewhere = ClusterIdentity.of("zk9:2181", "/team-a")  # the same root, another ensemble
    assert origin_problem(ours, elsewhere, "etl", other_era) is not None


def test_the_origin_of_this_clusters_era_is_ours_however_its_servers_are_named() -> None:
    """One cluster's supervisors may reach ZooKeeper by other names (a proxy, a load
    balancer, a host name for an address): its era, which its tokens alone carry, says it
    is one cluster."""
    ours = CheckpointOrigin.now(A, "etl", TOKEN.era)
    proxied = ClusterIdentity.of("127.0.0.1:40123", "/team-a")
    assert origin_problem(ours, proxied, "etl", TOKEN.era) is None
    assert origin_problem(ours, proxied, "etl", TOKEN.era + 1) is not None
    assert origin_problem(ours, proxied, "report", TOKEN.era) is not None


def test_a_location_of_another_cluster_is_refused_naming_it_and_the_fix(tmp_path: Path) -> None:
    location = str(tmp_path / "ck" / "etl")
    assert check_origin(location, A, "etl", TOKEN.era) is None  # new: no origin yet
    CheckpointOwners(location, TOKEN).claim()
    other_era = TOKEN.era + 1
    record_origin(location, CheckpointOrigin.now(B, "etl", other_era))

    error = check_origin(location, A, "etl", TOKEN.era)

    assert error is not None
    assert error.startswith(f"the checkpoint location {location} is refused")
    assert "stratus kill --purge etl" in error
    assert "pipeline.checkpoint.subpath" in error
    assert origin_path(location) in error
    assert check_origin(location, B, "etl", other_era) is None
    assert Outcome.refused(error).exit_code == REFUSED_EXIT


def test_an_origin_stratus_did_not_write_is_refused(tmp_path: Path) -> None:
    location = tmp_path / "etl"
    (location / OWNERS_DIR).mkdir(parents=True)
    (location / OWNERS_DIR / "origin.json").write_text(json.dumps({"pipeline": "etl"}))
    error = check_origin(str(location), A, "etl", TOKEN.era)
    assert error is not None and "not one stratus wrote" in error


def test_an_empty_origin_left_by_a_write_cut_short_is_none_and_written_again(
    tmp_path: Path,
) -> None:
    """A worker of an earlier release stopped between opening the origin and writing it
    left it empty: that names no one, so the location is this pipeline's to claim."""
    location = tmp_path / "etl"
    CheckpointOwners(str(location), TOKEN).claim()
    (location / OWNERS_DIR / "origin.json").write_bytes(b"")

    assert check_origin(str(location), A, "etl", TOKEN.era) is None
    record_origin(str(location), CheckpointOrigin.now(A, "etl", TOKEN.era))
    assert check_origin(str(location), B, "report", TOKEN.era + 1) is not None  # written
    assert (location / OWNERS_DIR / "origin.json").stat().st_mode & 0o777 == 0o600


def test_an_origin_is_replaced_whole_so_a_worker_stopped_in_its_write_leaves_the_old_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing of a new origin is visible before all of it is: a worker stopped before
    the rename (stood in for by a failing one) leaves the previous owner's origin whole."""
    location = str(tmp_path / "etl")
    CheckpointOwners(location, TOKEN).claim()
    record_origin(location, CheckpointOrigin.now(A, "etl", TOKEN.era))

    def stopped(*args: object) -> None:
        raise OSError("stopped before the rename")

    monkeypatch.setattr("stratus.files.os.replace", stopped)
    with pytest.raises(OSError, match="before the rename"):
        record_origin(location, CheckpointOrigin.now(B, "report", TOKEN.era + 1))
    monkeypatch.undo()
    assert check_origin(location, A, "etl", TOKEN.era) is None  # still the previous one
    assert check_origin(location, B, "report", TOKEN.era + 1) is not None


def test_an_origin_a_standby_worker_may_not_read_yet_is_left_to_its_promotion(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A standby worker of another user than the active worker's may not read the location
    before its promotion gives it to its user (the tests run as root, who reads everything:
    the denial is the file system's answer stood in for)."""
    location = str(tmp_path / "etl")
    CheckpointOwners(location, TOKEN).claim()
    record_origin(location, CheckpointOrigin.now(B, "etl", TOKEN.era + 1))

    def denied(_self: object, path: str, *args: object, **kwargs: object) -> bytes:
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(LocalFileSystem, "cat_file", denied)
    error = check_origin(location, A, "etl", TOKEN.era)
    assert error is not None and "cannot be read" in error  # a worker: refused
    assert check_origin(location, A, "etl", TOKEN.era, denied_is_unknown=True) is None


def test_this_clusters_checkpoints_move_from_the_old_default_root(tmp_path: Path) -> None:
    legacy, location = tmp_path / "stratus-checkpoints" / "etl", tmp_path / "new" / "etl"
    CheckpointOwners(str(legacy), FencingToken(era=TOKEN.era, zxid=7)).claim()
    (legacy / "counts" / "offsets").mkdir(parents=True)
    location.mkdir(parents=True)  # made empty by a supervisor for a worker of another user

    assert adopt_legacy(str(legacy), str(location), TOKEN) is None

    assert not legacy.exists()
    assert (location / "counts" / "offsets").is_dir()
    assert adopt_legacy(str(legacy), str(location), TOKEN) is None  # nothing left to move


def test_another_clusters_checkpoints_stay_in_the_old_default_root(tmp_path: Path) -> None:
    legacy, location = tmp_path / "stratus-checkpoints" / "etl", tmp_path / "new" / "etl"
    CheckpointOwners(str(legacy), FencingToken(era=TOKEN.era + 1, zxid=7)).claim()

    assert adopt_legacy(str(legacy), str(location), TOKEN) is None

    assert legacy.is_dir() and not location.exists()


def test_checkpoints_already_in_the_new_root_are_never_replaced(tmp_path: Path) -> None:
    legacy, location = tmp_path / "stratus-checkpoints" / "etl", tmp_path / "new" / "etl"
    CheckpointOwners(str(legacy), TOKEN).claim()
    CheckpointOwners(str(location), TOKEN).claim()

    assert adopt_legacy(str(legacy), str(location), TOKEN) is None

    assert legacy.is_dir() and (location / OWNERS_DIR).is_dir()
