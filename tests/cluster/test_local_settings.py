"""``stratus local`` hands the user's ``--config``, ``-c`` and ``--log-level`` to its daemons.

The daemons get the user's settings on top of the local cluster's tuning, and the cluster's
own addresses, ports, directories, ZooKeeper and security win over them. No Spark: a nimbus's
answer and its log show a setting taking effect; the command's own run stops at its first
submit, which the user's upload limit refuses in the nimbus.
"""

from __future__ import annotations

import io
import os
import stat
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml
from rich.console import Console

from stratus.config import load_config
from stratus.errors import ConfigError
from stratus.local.cluster import LocalCluster
from stratus.local.user_settings import UserSettings, is_local_key
from tests.harness.zkfixtures import wait_until

pytestmark = pytest.mark.slow


def user_settings(*overrides: str) -> UserSettings:
    return UserSettings.of(load_config(None, list(overrides), environ={}))


def test_only_the_keys_the_user_set_are_kept_and_the_local_clusters_own_are_left_out() -> None:
    user = user_settings(
        "log.level=warning",
        "nimbus.max.request.bytes=2048",
        "nimbus.port=1",
        "zookeeper.servers=192.0.2.1:2181",
        "nimbus.tls.cert=/etc/cert.pem",
        "zookeeper.auth.scheme=digest",
    )
    assert user.values == {"log.level": "warning", "nimbus.max.request.bytes": 2048}
    assert user.ignored == (
        "nimbus.port",
        "nimbus.tls.cert",
        "zookeeper.auth.scheme",
        "zookeeper.servers",
    )


def test_the_local_keys_are_exact_names_or_whole_prefixes() -> None:
    assert is_local_key("nimbus.port")
    assert not is_local_key("nimbus.port.extra")  # an exact name matches itself alone
    assert is_local_key("zookeeper.ssl.ca.file")
    assert not is_local_key("zookeeper.session.timeout.secs")
    assert not is_local_key("pipeline.checkpoint.schemes")


def test_a_users_key_wins_over_the_local_tuning_and_the_rest_stays(tmp_path: Path) -> None:
    user = user_settings("zookeeper.session.timeout.secs=6")
    path = user.write(tmp_path / "user.yaml")
    options = user.options(
        path,
        ["-c", "zookeeper.session.timeout.secs=3", "-c", "nimbus.monitor.freq.secs=0.5"],
    )
    assert options == ["--config", str(path), "-c", "nimbus.monitor.freq.secs=0.5"]
    conf = load_config(path, ["nimbus.monitor.freq.secs=0.5"], environ={})
    assert conf.zookeeper_session_timeout_secs == 6
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert yaml.safe_load(path.read_text()) == {"zookeeper.session.timeout.secs": 6}


def test_settings_that_do_not_fit_the_local_tuning_are_refused_before_any_start(
    tmp_path: Path,
) -> None:
    # fine alone, but 3 s to fence plus the local cluster's 1.5 s to stop a worker do not
    # end before its 4 s after which the leader moves a supervisor's pipelines
    user = user_settings("supervisor.fence.timeout.secs=3")
    path = user.write(tmp_path / "user.yaml")
    options = user.options(
        path,
        [
            "-c", "supervisor.fence.timeout.secs=2",
            "-c", "supervisor.worker.stop.secs=1.5",
            "-c", "nimbus.supervisor.timeout.secs=4",
        ],
    )  # fmt: skip
    with pytest.raises(ConfigError, match="your settings do not fit the local cluster's"):
        user.check(path, options)


def test_the_local_clusters_daemons_take_the_users_settings_and_keep_their_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A STRATUS_CONF in the environment reaches the children only through the user's
    # settings (stratus local reads it as its own --config): here it would stop them.
    bad = tmp_path / "env.yaml"
    bad.write_text("nimbus.tls.cert: /nonexistent/cert.pem\nnimbus.tls.key: /nonexistent/key\n")
    monkeypatch.setenv("STRATUS_CONF", str(bad))
    out = io.StringIO()
    user = user_settings(
        "log.level=warning",
        "nimbus.max.request.bytes=2048",
        "nimbus.port=1",  # the local cluster's own: ignored
        "zookeeper.servers=192.0.2.1:2181",
        "supervisor.local.dir=/nonexistent",
    )
    cluster = LocalCluster(
        tmp_path / "cluster", Console(file=out, width=300), nimbuses=1, supervisors=1, user=user
    )
    (tmp_path / "cluster").mkdir()
    try:
        cluster.start()
        nimbus, supervisor = cluster.nimbuses[0], cluster.supervisors[0]
        wait_until(cluster.leader_term, 30, "the nimbus to lead")  # kill is leader-only
        response = httpx.post(
            f"{nimbus.url}/api/v1/pipelines/absent/kill", json={"pad": "x" * 4096}, timeout=10
        )
        assert response.status_code == 413
        assert "nimbus.max.request.bytes (2048 bytes)" in response.json()["message"]
        nimbus_log = nimbus.log_path.read_text()
        assert f"nimbus {nimbus.address}" in nimbus_log  # its ready line: the log is written
        assert "event=nimbus_started" not in nimbus_log  # an info line, below warning
        assert "level=INFO" not in supervisor.log_path.read_text()
    finally:
        cluster.close()
    printed = " ".join(out.getvalue().split())
    assert "every daemon gets your log.level, nimbus.max.request.bytes" in printed
    assert (
        "kept the local cluster's own nimbus.port, supervisor.local.dir, zookeeper.servers"
        in printed
    )


def test_stratus_local_gives_its_daemons_the_command_lines_settings(tmp_path: Path) -> None:
    """The command itself: -c and --log-level reach the nimbuses, whose upload limit then
    refuses the first example's package; the command says so and stops everything."""
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    env.pop("STRATUS_CONF", None)
    command = [sys.executable, "-m", "stratus", "local", "--log-level", "warning"]
    command += ["-c", "nimbus.max.upload.bytes=100", "-c", "nimbus.port=1"]
    result = subprocess.run(
        command, capture_output=True, text=True, env=env, timeout=180, check=False
    )
    output = " ".join((result.stdout + result.stderr).split())
    assert result.returncode != 0, output
    assert "every daemon gets your log.level, nimbus.max.upload.bytes" in output
    assert "kept the local cluster's own nimbus.port" in output
    assert "nimbus.max.upload.bytes (100 bytes)" in output
    assert list(tmp_path.glob("stratus-local-*")) == []  # its directory removed: all stopped
