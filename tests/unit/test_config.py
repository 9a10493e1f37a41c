"""Configuration: defaults, a YAML file, STRATUS_CONF, ``-c key=value``, and clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from stratus.cli.main import main
from stratus.config import (
    CONFIG_ENV_VAR,
    StratusConfig,
    config_from_mapping,
    load_config,
    valid_keys,
)
from stratus.errors import ConfigError
from stratus.nimbus.settings import NimbusSettings


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_apply_when_nothing_is_configured() -> None:
    conf = load_config(environ={})
    assert conf.zookeeper_servers == ["127.0.0.1:2181"]
    assert conf.zookeeper_hosts() == "127.0.0.1:2181"
    assert conf.zookeeper_root == "/stratus"
    assert conf.zookeeper_session_timeout_secs == 10.0
    assert conf.zookeeper_connection_timeout_secs == 15.0
    assert conf.zookeeper_server_port == 2181
    assert conf.zookeeper_server_data_dir is None
    assert conf.zookeeper_server_tick_time_ms == 200
    assert conf.elect_stop_grace() == 1.0


def test_a_yaml_file_sets_keys_by_their_dotted_names(tmp_path: Path) -> None:
    path = write(
        tmp_path / "stratus.yaml",
        "zookeeper.servers: [zk1:2181, zk2:2181]\n"
        "zookeeper.session.timeout.secs: 6\n"
        "zookeeper.server.data.dir: /var/tmp/zk\n",
    )
    conf = load_config(path, environ={})
    assert conf.zookeeper_hosts() == "zk1:2181,zk2:2181"
    assert conf.zookeeper_session_timeout_secs == 6.0
    assert conf.zookeeper_server_data_dir == "/var/tmp/zk"
    assert conf.zookeeper_root == "/stratus"


def test_stratus_conf_names_the_file_when_no_path_is_given(tmp_path: Path) -> None:
    path = write(tmp_path / "env.yaml", "zookeeper.root: /from-env\n")
    assert load_config(environ={CONFIG_ENV_VAR: str(path)}).zookeeper_root == "/from-env"


def test_an_explicit_path_wins_over_stratus_conf(tmp_path: Path) -> None:
    env_file = write(tmp_path / "env.yaml", "zookeeper.root: /from-env\n")
    explicit = write(tmp_path / "explicit.yaml", "zookeeper.root: /explicit\n")
    conf = load_config(explicit, environ={CONFIG_ENV_VAR: str(env_file)})
    assert conf.zookeeper_root == "/explicit"


def test_overrides_win_over_the_file_and_the_last_override_wins(tmp_path: Path) -> None:
    path = write(tmp_path / "stratus.yaml", "zookeeper.root: /file\nzookeeper.server.port: 2182\n")
    conf = load_config(path, ["zookeeper.root=/first", "zookeeper.root=/second"], environ={})
    assert conf.zookeeper_root == "/second"
    assert conf.zookeeper_server_port == 2182


def test_override_values_are_parsed_like_yaml() -> None:
    conf = load_config(
        overrides=[
            "zookeeper.servers=a:1, b:2",
            "zookeeper.session.timeout.secs=6",
            "zookeeper.server.port=0",
        ],
        environ={},
    )
    assert conf.zookeeper_servers == ["a:1", "b:2"]
    assert conf.zookeeper_session_timeout_secs == 6.0
    assert conf.zookeeper_server_port == 0


def test_an_override_without_equals_is_an_error() -> None:
    with pytest.raises(ConfigError, match="not of the form key=value"):
        load_config(overrides=["zookeeper.root"], environ={})


def test_an_unknown_key_names_the_closest_valid_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"did you mean 'zookeeper\.session\.timeout\.secs'"):
        load_config(overrides=["zookeeper.session.timeout.sec=4"], environ={})
    path = write(tmp_path / "stratus.yaml", "zookeper.root: /x\n")
    with pytest.raises(ConfigError, match=r"'zookeper\.root'; did you mean 'zookeeper\.root'"):
        load_config(path, environ={})


def test_an_unknown_key_far_from_any_valid_one_gets_no_suggestion() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(overrides=["completely.different=1"], environ={})
    assert "did you mean" not in str(caught.value)


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("zookeeper.session.timeout.secs=abc", "valid number"),
        ("zookeeper.server.port=abc", "valid integer"),
        ("zookeeper.server.port=70000", "less than or equal to 65535"),
        ("zookeeper.session.timeout.secs=0", "greater than 0"),
        ("zookeeper.server.tick.time.ms=-5", "greater than 0"),
        ("nimbus.standby.workers.max=-2", "greater than or equal to -1"),
    ],
)
def test_a_bad_value_names_the_key_and_the_expected_type(override: str, expected: str) -> None:
    key = override.partition("=")[0]
    with pytest.raises(ConfigError) as caught:
        load_config(overrides=[override], environ={})
    assert key in str(caught.value)
    assert expected in str(caught.value)


def test_the_stop_grace_must_be_less_than_a_quarter_of_the_session_timeout() -> None:
    with pytest.raises(ConfigError, match=r"elect\.stop\.grace\.secs must be less than a quarter"):
        load_config(
            overrides=["zookeeper.session.timeout.secs=8", "elect.stop.grace.secs=2"], environ={}
        )
    conf = load_config(
        overrides=["zookeeper.session.timeout.secs=8", "elect.stop.grace.secs=1.9"], environ={}
    )
    assert conf.elect_stop_grace_secs == 1.9


def test_a_nimbus_fetches_no_more_ranges_at_once_than_one_address_may_open() -> None:
    with pytest.raises(ConfigError, match=r"nimbus\.code\.download\.parts \(40\) must be at most"):
        load_config(overrides=["nimbus.code.download.parts=40"], environ={})
    conf = load_config(
        overrides=["nimbus.code.download.parts=40", "nimbus.code.max.connections.per.address=40"],
        environ={},
    )
    assert conf.nimbus_code_download_parts == 40


def test_the_default_grace_fits_a_short_session() -> None:
    conf = load_config(overrides=["zookeeper.session.timeout.secs=2"], environ={})
    assert conf.elect_stop_grace() == pytest.approx(0.4)


def test_malformed_yaml_is_a_clear_error_naming_the_file(tmp_path: Path) -> None:
    path = write(tmp_path / "broken.yaml", "zookeeper.servers: [a, b\n")
    with pytest.raises(ConfigError, match="is not valid YAML") as caught:
        load_config(path, environ={})
    assert str(path) in str(caught.value)


@pytest.mark.parametrize(("text", "kind"), [("- a\n- b\n", "list"), ("just words\n", "str")])
def test_a_file_that_is_not_a_mapping_is_a_clear_error(
    tmp_path: Path, text: str, kind: str
) -> None:
    path = write(tmp_path / "list.yaml", text)
    with pytest.raises(ConfigError, match=f"must be a mapping of dotted keys.*not a {kind}"):
        load_config(path, environ={})


def test_an_empty_file_means_defaults(tmp_path: Path) -> None:
    path = write(tmp_path / "empty.yaml", "")
    assert load_config(path, environ={}) == load_config(environ={})


def test_a_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read configuration file"):
        load_config(tmp_path / "nope.yaml", environ={})


def test_every_field_has_a_dotted_key_and_the_mapping_api_uses_them() -> None:
    keys = valid_keys()
    assert len(keys) == len(StratusConfig.model_fields)
    assert all("." in key for key in keys)
    conf = config_from_mapping({"zookeeper.root": "/mapped"})
    assert conf.zookeeper_root == "/mapped"


def test_a_configuration_is_immutable() -> None:
    conf = load_config(environ={})
    with pytest.raises(ValueError, match="frozen"):
        conf.zookeeper_root = "/changed"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("ttl", "key", "timeout"),
    [(8, "nimbus.supervisor.timeout.secs", 10), (20, "nimbus.task.timeout.secs", 30)],
)
def test_pulses_must_outlive_the_leader_timeouts_with_the_pacemaker_store(
    ttl: float, key: str, timeout: float
) -> None:
    pacemaker = {"cluster.state.store": "pacemaker", "pacemaker.pulse.ttl.secs": ttl}
    with pytest.raises(ConfigError, match=rf"pacemaker.pulse.ttl.secs \({ttl}\) must exceed {key}"):
        config_from_mapping(pacemaker)
    assert config_from_mapping(
        {**pacemaker, "pacemaker.pulse.ttl.secs": 31}
    ).pacemaker_pulse_ttl_secs
    assert config_from_mapping({"pacemaker.pulse.ttl.secs": ttl})  # heartbeats in ZooKeeper


def test_a_daemon_refuses_to_start_with_pulses_shorter_than_a_timeout() -> None:
    args = [
        "supervisor",
        "-c",
        "cluster.state.store=pacemaker",
        "-c",
        "nimbus.task.timeout.secs=90",
    ]
    result = CliRunner().invoke(main, args)
    assert result.exit_code != 0
    assert (
        "pacemaker.pulse.ttl.secs (60) must exceed nimbus.task.timeout.secs (90)" in result.output
    )


def test_a_hung_pacemaker_is_given_up_before_a_supervisor_fences_itself() -> None:
    pacemaker = {"cluster.state.store": "pacemaker", "supervisor.fence.timeout.secs": 2}
    with pytest.raises(ConfigError, match=r"pacemaker.client.timeout.secs \(5\) must be less"):
        config_from_mapping(pacemaker)
    assert config_from_mapping({**pacemaker, "pacemaker.client.timeout.secs": 1})


def test_the_leader_places_standby_workers_by_its_bound_and_the_state_store() -> None:
    standby = NimbusSettings.from_config(
        config_from_mapping({"nimbus.standby.workers.max": 3})
    ).scheduling.standby
    assert (standby.max_workers, standby.needs_beat_lease) == (3, False)  # zookeeper: no beats
    pacemakers = {"cluster.state.store": "pacemaker", "pacemaker.servers": ["127.0.0.1:6699"]}
    standby = NimbusSettings.from_config(config_from_mapping(pacemakers)).scheduling.standby
    assert (standby.max_workers, standby.needs_beat_lease) == (-1, True)


def test_the_leader_fences_a_silent_supervisor_at_half_the_timeout_unless_told() -> None:
    assert config_from_mapping({}).supervisor_fence_after() == 5.0
    shorter = {"nimbus.supervisor.timeout.secs": 8, "supervisor.fence.timeout.secs": 4}
    assert config_from_mapping(shorter).supervisor_fence_after() == 4
    told = config_from_mapping({"nimbus.supervisor.fence.after.secs": 7})
    assert told.supervisor_fence_after() == 7


@pytest.mark.parametrize("after", [10, 12])
def test_the_leaders_fence_must_come_before_the_supervisor_timeout(after: float) -> None:
    with pytest.raises(
        ConfigError,
        match=rf"nimbus.supervisor.fence.after.secs \({after}\) must be less than "
        r"nimbus.supervisor.timeout.secs \(10\)",
    ):
        config_from_mapping({"nimbus.supervisor.fence.after.secs": after})


def test_the_leaders_fence_must_not_catch_a_supervisor_between_two_rounds() -> None:
    with pytest.raises(
        ConfigError,
        match=r"fence.after.secs \(3\) must be more than nimbus.monitor.freq.secs \+ "
        r"worker.heartbeat.frequency.secs \(3\)",
    ):
        config_from_mapping({"nimbus.supervisor.fence.after.secs": 3})
    assert config_from_mapping({"nimbus.supervisor.fence.after.secs": 3.5})
    slow_rounds = config_from_mapping({"nimbus.monitor.freq.secs": 4.5})
    assert slow_rounds.supervisor_fence_after() is None  # half of 10 is too short: never
    never = config_from_mapping({"nimbus.supervisor.fence.after.secs": 0})
    assert never.supervisor_fence_after() is None
