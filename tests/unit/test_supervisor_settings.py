"""The supervisor's settings (``supervisor/settings.py``): each record carries the keys its
component reads, and the defaults that depend on the host are resolved once."""

from __future__ import annotations

import socket
import tempfile
from pathlib import Path

import pytest

from stratus.api.records import ClusterIdentity
from stratus.config import config_from_mapping
from stratus.errors import ConfigError
from stratus.state.factory import StateStoreSettings
from stratus.supervisor.adoption import check_owner
from stratus.supervisor.errors import SupervisorStartError
from stratus.supervisor.settings import (
    DepsSettings,
    LoopSettings,
    RestartSettings,
    SpecSettings,
    SupervisorSettings,
    WorkerTimeouts,
)


def test_every_record_carries_the_keys_of_its_component(tmp_path: Path) -> None:
    settings = SupervisorSettings.from_config(
        config_from_mapping(
            {
                "supervisor.id": "node-7",
                "supervisor.host": "n7.example",
                "supervisor.slots": 3,
                "supervisor.local.dir": str(tmp_path),
                "supervisor.fence.timeout.secs": 5,
                "supervisor.worker.stop.secs": 2,
                "supervisor.worker.timeout.secs": 9,
                "supervisor.worker.max.restarts": 4,
                "supervisor.worker.restart.backoff.secs": 0.5,
                "supervisor.worker.restart.reset.secs": 30,
                "worker.heartbeat.frequency.secs": 1.5,
                "pipeline.spark.master": "spark://m:7077",
                "pipeline.checkpoint.root": "s3://ck",
                "zookeeper.session.timeout.secs": 4,
                "zookeeper.root": "/prod",
                "nimbus.max.upload.bytes": 4096,
                "supervisor.deps.index.url": "https://mirror.example/simple",
                "supervisor.deps.find.links": ["/srv/wheelhouse", "/mnt/wheels"],
                "supervisor.deps.offline": True,
                "supervisor.deps.install.timeout.secs": 90,
                "supervisor.standby.warmup.batches": 7,
            }
        )
    )
    assert (settings.id, settings.host, settings.slots) == ("node-7", "n7.example", 3)
    assert (settings.local_dir, settings.fence_timeout_secs) == (tmp_path, 5.0)
    assert (settings.zk.root, settings.zk.session_timeout) == ("/prod", 4.0)
    assert settings.state_store == StateStoreSettings("zookeeper", 4.0)
    assert settings.loop == LoopSettings(
        heartbeat_secs=1.5,
        restart=RestartSettings(backoff_secs=0.5, max_restarts=4, reset_secs=30.0),
        timeouts=WorkerTimeouts(stop_secs=2.0, hang_secs=9.0),
    )
    assert settings.spec == SpecSettings(
        spark_master="spark://m:7077",
        checkpoint_root="s3://ck",
        heartbeat_secs=1.5,
        stop_grace_secs=2.0,
        lease_path=tmp_path / "lease",
        cluster=ClusterIdentity(root="/prod", servers=("127.0.0.1:2181",)),
        legacy_checkpoint_root=None,  # a configured root stays as configured
        standby_warm_up_batches=7,
    )
    assert (settings.code.max_package_bytes, settings.code.retry_secs) == (4096, 0.5)
    assert settings.deps == DepsSettings(
        index_url="https://mirror.example/simple",
        find_links=("/srv/wheelhouse", "/mnt/wheels"),
        offline=True,
        install_timeout_secs=90.0,
        pack=True,  # its pipeline.spark.master is a cluster's: executors need the archive
    )


def test_the_id_host_and_local_dir_default_to_the_host_name(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(socket, "gethostname", lambda: "node-9")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    settings = SupervisorSettings.from_config(config_from_mapping({}))
    assert (settings.id, settings.host) == ("node-9", "node-9")
    assert (settings.http.bind_host, settings.http.advertised_host) == ("node-9", "node-9")
    assert settings.local_dir == tmp_path / "stratus-supervisor-node-9.stratus"
    assert settings.deps.pack is False  # local[*] alone: no archive is ever packed


def test_the_endpoint_listens_on_supervisor_host_unless_its_bind_host_is_set() -> None:
    conf = {"supervisor.id": "s1", "supervisor.host": "10.0.0.11"}
    http = SupervisorSettings.from_config(config_from_mapping(conf)).http
    assert (http.bind_host, http.advertised_host) == ("10.0.0.11", "10.0.0.11")
    every_interface = config_from_mapping({**conf, "supervisor.http.bind.host": "0.0.0.0"})
    http = SupervisorSettings.from_config(every_interface).http
    assert (http.bind_host, http.advertised_host) == ("0.0.0.0", "10.0.0.11")


def test_environments_are_packed_when_a_pipeline_may_name_a_cluster_master() -> None:
    conf = config_from_mapping({"supervisor.id": "s1", "pipeline.spark.masters": ["yarn"]})
    assert SupervisorSettings.from_config(conf).deps.pack is True
    local_only = config_from_mapping(
        {"supervisor.id": "s1", "pipeline.spark.masters": ["local[4]"]}
    )
    assert SupervisorSettings.from_config(local_only).deps.pack is False


def test_a_host_name_that_cannot_be_an_id_asks_for_supervisor_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(socket, "gethostname", lambda: "-bad host-")
    with pytest.raises(SupervisorStartError, match="'-bad host-' cannot be a supervisor id"):
        SupervisorSettings.from_config(config_from_mapping({}))


def test_two_clusters_on_one_machine_get_local_dirs_and_checkpoint_roots_of_their_own(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    a = config_from_mapping({"supervisor.id": "s1", "zookeeper.root": "/team-a"})
    b = config_from_mapping({"supervisor.id": "s1", "zookeeper.servers": "zk:2181/x/team-b"})
    settings_a, settings_b = SupervisorSettings.from_config(a), SupervisorSettings.from_config(b)
    assert settings_a.local_dir == tmp_path / "stratus-supervisor-s1.team-a"
    assert settings_b.local_dir == tmp_path / "stratus-supervisor-s1.x_team-b_stratus"
    assert settings_a.spec.checkpoint_root == str(tmp_path / "stratus-checkpoints.team-a")
    assert settings_b.spec.checkpoint_root == str(tmp_path / "stratus-checkpoints.x_team-b_stratus")
    assert settings_a.spec.legacy_checkpoint_root == str(tmp_path / "stratus-checkpoints")


def test_an_upgraded_supervisor_on_defaults_keeps_the_local_dir_that_names_its_cluster(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The default of 0.2.0 and earlier, <tmp>/stratus-supervisor-<id>, stays in use while
    its owner.json names this supervisor of this cluster: its workers are adopted."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    conf = config_from_mapping({"supervisor.id": "s1", "zookeeper.root": "/prod"})
    legacy = tmp_path / "stratus-supervisor-s1"
    (legacy / "workers").mkdir(parents=True)
    check_owner(legacy, "s1", ClusterIdentity.of("127.0.0.1:2181", "/prod"))  # writes it
    assert SupervisorSettings.from_config(conf).local_dir == legacy

    other = config_from_mapping({"supervisor.id": "s1", "zookeeper.root": "/other"})
    assert SupervisorSettings.from_config(other).local_dir == (
        tmp_path / "stratus-supervisor-s1.other"
    )


def test_standby_workers_warm_up_for_40_batches_unless_the_operator_says_otherwise() -> None:
    conf = {"supervisor.id": "s1", "supervisor.host": "10.0.0.11"}
    default = SupervisorSettings.from_config(config_from_mapping(conf)).spec
    assert default.standby_warm_up_batches == 40
    with pytest.raises(ConfigError, match=r"supervisor\.standby\.warmup\.batches"):
        config_from_mapping({**conf, "supervisor.standby.warmup.batches": 0})
