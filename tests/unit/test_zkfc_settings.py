"""``stratus zkfc``'s settings: what the configuration becomes, and the errors at load."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from stratus.api.errors import UnauthenticatedError
from stratus.cli.main import main
from stratus.config import load_config
from stratus.ha.errors import ZkfcConfigError
from stratus.ha.fencing import FenceTarget, MethodSpec
from stratus.ha.settings import SupervisedNimbusSettings, ZkfcSettings
from stratus.ha.supervised_nimbus import (
    CONTROLLER_ENV,
    CONTROLLER_PRINCIPAL,
    controller_credentials,
    controller_plan,
)
from stratus.process import Lifeline
from stratus.security.access import Caller
from stratus.security.client_auth import NO_AUTH
from stratus.security.roles import Role
from stratus.security.tokens import hash_token
from stratus.settings import access_policy


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


def test_a_supervised_nimbus_controller_takes_a_free_endpoint_port_unless_one_is_set() -> None:
    conf = load_config(overrides=["nimbus.host=10.0.0.5", "nimbus.port=6627"], environ={})
    plan = controller_plan(
        SupervisedNimbusSettings.from_config(conf), ["nimbus"], NO_AUTH, token="t" * 64, python="py"
    )
    settings = plan.settings
    assert settings.target == FenceTarget("10.0.0.5", 6627)
    assert settings.port == 0  # several nimbuses on one host: a free port, in ZooKeeper
    assert settings.kill_unresponsive
    assert settings.supervise is not None
    assert settings.supervise.command == ("py", "-m", "stratus", "nimbus")
    assert settings.supervise.lifeline is Lifeline.PIPE
    # the child learns the token's digest alone, and takes it as its controller's
    assert dict(settings.supervise.environment) == {CONTROLLER_ENV: hash_token("t" * 64)}
    assert plan.service_auth.token == "t" * 64
    fixed = controller_credentials(hash_token("t" * 64))
    entry = fixed.entry_of_token("t" * 64)
    assert entry is not None and entry.role is Role.ADMIN
    pinned = load_config(overrides=["ha.zkfc.port=8019"], environ={})
    assert (
        controller_plan(
            SupervisedNimbusSettings.from_config(pinned), ["nimbus"], NO_AUTH
        ).settings.port
        == 8019
    )


def test_a_supervised_nimbus_on_port_0_gets_one_port_for_every_start_of_its_child() -> None:
    conf = load_config(overrides=["nimbus.port=0"], environ={})
    settings = controller_plan(
        SupervisedNimbusSettings.from_config(conf), ["nimbus", "-c", "nimbus.port=0"], NO_AUTH
    ).settings
    assert settings.supervise is not None
    *_, last_option = settings.supervise.command
    assert last_option == f"nimbus.port={settings.target.port}" and settings.target.port > 0


def test_a_controller_digest_that_is_not_one_is_an_error_naming_the_variable() -> None:
    with pytest.raises(ZkfcConfigError, match=CONTROLLER_ENV):
        controller_credentials("not-a-digest")


def test_the_controllers_entry_outlives_a_reload_of_the_token_file(tmp_path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"read token {hash_token('r' * 32)} principal=node\n")
    tokens.chmod(0o600)
    conf = load_config(overrides=[f"nimbus.auth.tokens.file={tokens}"], environ={})
    policy = access_policy(conf, fixed=controller_credentials(hash_token("c" * 32)))
    assert policy.authorize(f"Bearer {'c' * 32}", None, Role.ADMIN) == Caller(
        CONTROLLER_PRINCIPAL, Role.ADMIN
    )
    tokens.write_text(f"admin token {hash_token('a' * 32)} principal=ops\n")
    assert policy.reload()
    assert policy.authorize(f"Bearer {'c' * 32}", None, Role.ADMIN) is not None
    assert policy.authorize(f"Bearer {'a' * 32}", None, Role.ADMIN) is not None
    with pytest.raises(UnauthenticatedError):
        policy.authorize(f"Bearer {'r' * 32}", None, Role.READ)
