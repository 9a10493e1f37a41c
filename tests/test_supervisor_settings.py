"""The supervisor's settings (``supervisor/settings.py``): each record carries the keys its
component reads, and the defaults that depend on the host are resolved once."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from stratus.config import config_from_mapping
from stratus.state.factory import StateStoreSettings
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
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(socket, "gethostname", lambda: "node-9")
    settings = SupervisorSettings.from_config(config_from_mapping({}))
    assert (settings.id, settings.host) == ("node-9", "node-9")
    assert (settings.http.bind_host, settings.http.advertised_host) == ("node-9", "node-9")
    assert settings.local_dir.name == "stratus-supervisor-node-9"
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
