"""``stratus zkfc``'s settings: what the configuration becomes, and the errors at load."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from stratus.cli.main import main
from stratus.config import load_config
from stratus.ha.errors import ZkfcConfigError
from stratus.ha.fencing import FenceTarget, MethodSpec
from stratus.ha.settings import ZkfcSettings


def test_the_settings_follow_the_keys() -> None:
    conf = load_config(
        overrides=[
            "ha.zkfc.target=n1.example:6627",
            "ha.zkfc.group=nimbus-east",
            "ha.health.check.interval.secs=0.5",
            "ha.health.rpc.timeout.secs=2",
            "ha.fencing.methods=graceful, process(/run/n.pid)",
        ],
        environ={},
    )
    settings = ZkfcSettings.from_config(conf)
    assert settings.target == FenceTarget("n1.example", 6627)
    assert settings.group == "nimbus-east"
    assert settings.health.check_interval == 0.5 and settings.rpc_timeout == 2.0
    assert settings.fencing_methods == [MethodSpec("graceful"), MethodSpec("process", "/run/n.pid")]
    assert ZkfcSettings.from_config(conf, target="n2:1").target == FenceTarget("n2", 1)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ([], "--target"),
        (["ha.zkfc.target=n1.example"], "not a host:port"),
        (["ha.zkfc.target=n1:1", "ha.zkfc.group=/bad"], "ha.zkfc.group"),
    ],
)
def test_bad_settings_are_errors_that_say_what_to_do(overrides, message: str) -> None:
    with pytest.raises(ZkfcConfigError, match=message):
        ZkfcSettings.from_config(load_config(overrides=overrides, environ={}))


def test_the_command_refuses_a_bad_fencing_method_before_it_starts() -> None:
    result = CliRunner().invoke(
        main, ["zkfc", "--target", "127.0.0.1:1", "-c", "ha.fencing.methods=graceful, stonith"]
    )
    assert result.exit_code != 0
    assert "unknown fencing method 'stonith'" in result.output


def test_preference_and_supervision_follow_their_keys() -> None:
    conf = load_config(
        overrides=[
            "ha.zkfc.target=127.0.0.1:6627",
            "ha.zkfc.preferred=true",
            "ha.zkfc.nonpreferred.join.delay.secs=2",
            "ha.zkfc.supervise.command=stratus nimbus -c 'nimbus.port=6627'",
            "ha.zkfc.supervise.restart.backoff.secs=0.5",
            "ha.zkfc.supervise.stop.grace.secs=3",
        ],
        environ={},
    )
    settings = ZkfcSettings.from_config(conf)
    assert settings.preference.preferred and settings.preference.nonpreferred_join_delay == 2.0
    assert settings.supervise is not None
    assert settings.supervise.command == ("stratus", "nimbus", "-c", "nimbus.port=6627")
    assert settings.supervise.restart_backoff == 0.5 and settings.supervise.stop_grace == 3.0
    cli = ZkfcSettings.from_config(conf, supervise=("python", "-m", "svc"))
    assert cli.supervise is not None and cli.supervise.command == ("python", "-m", "svc")


def test_with_nothing_configured_there_is_no_preference_and_no_supervision() -> None:
    settings = ZkfcSettings.from_config(load_config(overrides=["ha.zkfc.target=n1:1"], environ={}))
    assert not settings.preference.preferred and settings.supervise is None


def test_a_badly_quoted_supervise_command_is_an_error() -> None:
    conf = load_config(
        overrides=["ha.zkfc.target=n1:1", "ha.zkfc.supervise.command=stratus 'nimbus"],
        environ={},
    )
    with pytest.raises(ZkfcConfigError, match=r"ha\.zkfc\.supervise\.command"):
        ZkfcSettings.from_config(conf)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--supervise"], "--supervise needs the service's command"),
        (["--", "sleep", "1"], "only with --supervise"),
    ],
)
def test_the_command_wants_supervise_and_a_command_together(args, message: str) -> None:
    result = CliRunner().invoke(main, ["zkfc", "--target", "127.0.0.1:1", *args])
    assert result.exit_code == 2
    assert message in result.output
