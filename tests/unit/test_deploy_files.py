"""The files of ``deploy/`` that docs/deploy.md tells an operator to install are valid: every
example configuration loads and turns security on (the files it names are the operator's,
absent here, and read at start: building the daemon's settings from it fails naming them),
every systemd unit runs a real stratus verb as the dedicated user, restarts, raises its file
limit and is hardened, and the zkfc's unit and configuration manage the nimbus of their
host."""

from __future__ import annotations

import configparser
import re
import shlex
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import click
import pytest
import yaml

from stratus.cli.main import main
from stratus.client_settings import client_auth
from stratus.config import StratusConfig, config_from_mapping, load_config
from stratus.errors import StratusError
from stratus.ha.settings import ZkfcSettings
from stratus.pacemaker.auth import AuthMethod, load_secrets
from stratus.pacemaker.server import check_server_settings
from stratus.security.access import AccessPolicy
from stratus.settings import (
    access_policy,
    pacemaker_client_settings,
    pacemaker_server_settings,
    zk_settings,
)
from stratus.supervisor.endpoint import check_reachable
from stratus.supervisor.errors import UnreachableEndpointError
from stratus.supervisor.settings import SupervisorSettings
from stratus.zk.paths import NIMBUS_GROUP

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
UNITS = sorted(DEPLOY.glob("*.service"))
PACEMAKER_CONF = DEPLOY / "pacemaker.yaml"
NIMBUS_CONF = DEPLOY / "nimbus.yaml"
ZKFC_CONF = DEPLOY / "zkfc.yaml"
SUPERVISOR_CONF = DEPLOY / "supervisor.yaml"
SUPERVISOR_UNIT = DEPLOY / "stratus-supervisor.service"
DOCS = DEPLOY.parent / "docs" / "deploy.md"
DAEMON_CONFS = sorted(p for p in DEPLOY.glob("*.yaml") if p != PACEMAKER_CONF)  # on ZooKeeper
HEARTBEAT_CONFS = [NIMBUS_CONF, SUPERVISOR_CONF]  # their heartbeats may go elsewhere
HARDENING = {"NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes"}
WRITE_NO_FILE = {"stratus-pacemaker.service", "stratus-zkfc.service"}


def _section(unit: Path, name: str) -> dict[str, str]:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keys keep their case
    parser.read_string(unit.read_text())
    return dict(parser[name])


def _service(unit: Path) -> dict[str, str]:
    return _section(unit, "Service")


def _settings(path: Path, uncommented: tuple[str, ...] = ()) -> dict[str, object]:
    """The keys an example file sets, with its commented lines that start with one of
    ``uncommented`` (``"# zookeeper.ssl."``) set too."""
    text = "\n".join(
        line.removeprefix("# ") if line.startswith(uncommented) else line
        for line in path.read_text().splitlines()
    )
    settings: dict[str, object] = yaml.safe_load(text)
    return settings


def test_the_units_and_configurations_are_there() -> None:
    names = {path.name for path in DEPLOY.iterdir()}
    assert {
        "stratus-zookeeper.service",
        "stratus-nimbus.service",
        "stratus-supervisor.service",
        "stratus-pacemaker.service",
        "stratus-zkfc.service",
        "nimbus.yaml",
        "supervisor.yaml",
        "pacemaker.yaml",
        "zkfc.yaml",
        "zoo.cfg",
    } <= names


@pytest.mark.parametrize("path", DAEMON_CONFS, ids=lambda p: p.name)
def test_an_example_configuration_loads(path: Path) -> None:
    conf = load_config(path=str(path))
    assert len(conf.zookeeper_servers) == 3  # an ensemble across three hosts


@pytest.mark.parametrize("path", DAEMON_CONFS, ids=lambda p: p.name)
def test_an_example_configuration_turns_security_on(path: Path) -> None:
    conf = load_config(path=str(path), environ={})
    assert conf.zookeeper_auth_scheme == "sasl"  # checked by the servers, unlike a digest
    assert conf.zookeeper_auth_sasl_mechanism == "DIGEST-MD5"
    assert conf.client_tls_ca and conf.client_auth_token_file  # code fetched over https
    named = [conf.zookeeper_auth_file, conf.client_auth_token_file]
    builders: list[Callable[[StratusConfig], object]] = [zk_settings, client_auth]
    if path in (NIMBUS_CONF, ZKFC_CONF, SUPERVISOR_CONF):  # the API, the zkfc's, the endpoint
        assert conf.nimbus_tls_cert and conf.nimbus_tls_key
        named.append(conf.nimbus_auth_tokens_file)
        builders.append(access_policy)
    if path == NIMBUS_CONF:
        assert conf.nimbus_bind_host == conf.nimbus_host
    for file, build in zip(named, builders, strict=True):
        assert file is not None
        if Path(file).exists():
            continue  # an operator's machine: the file is real
        with pytest.raises(StratusError, match=re.escape(file)):
            build(conf)  # read at start, not decorative


def test_the_supervisor_example_registers_an_endpoint_the_other_hosts_reach(
    tmp_path: Path,
) -> None:
    """Its endpoint listens on supervisor.host, over https, and registers that address; the
    same file without the token file would be refused (loopback alone, across hosts)."""
    secret = "0123456789abcdef0123456789abcdef"
    files = {
        "nimbus.auth.tokens.file": f"read token {secret}\n",
        "client.auth.token.file": f"{secret}\n",
        "zookeeper.auth.file": "stratus:password\n",
    }
    values = _settings(SUPERVISOR_CONF)
    for key, text in files.items():  # the operator's files, absent here
        path = tmp_path / key
        path.write_text(text)
        path.chmod(0o600)
        values[key] = str(path)
    settings = SupervisorSettings.from_config(config_from_mapping(values)).http
    check_reachable(settings, "host1")
    assert settings.bind_host == settings.advertised_host == values["supervisor.host"]
    assert settings.tls is not None and settings.policy.enabled and settings.spans_hosts()
    open_one = replace(settings, policy=AccessPolicy())
    with pytest.raises(UnreachableEndpointError, match=r"set nimbus\.auth\.tokens\.file"):
        check_reachable(open_one, "host1")


@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_a_unit_runs_as_the_dedicated_user_restarts_and_is_hardened(unit: Path) -> None:
    service = _service(unit)
    assert service["User"] == service["Group"] == "stratus"
    # The supervisor comes back whatever ended it: its workers wait to be adopted.
    restart = "always" if unit.name == SUPERVISOR_UNIT.name else "on-failure"
    assert service["Restart"] == restart
    assert int(service["LimitNOFILE"]) >= 65536
    assert {key: service.get(key) for key in HARDENING} == HARDENING
    if unit.name in WRITE_NO_FILE:  # it may write nowhere of its own
        assert "ReadWritePaths" not in service and "StateDirectory" not in service
    else:  # its directories made by systemd, the stratus user's alone
        assert service["StateDirectory"].startswith("stratus/")
        assert service["StateDirectoryMode"] == "0700"
        assert all(
            not path.startswith("/var/lib/") for path in service.get("ReadWritePaths", "").split()
        )
    if unit.name == "stratus-pacemaker.service":  # its store is in memory
        assert service["MemoryMax"]


def test_the_supervisor_unit_leaves_its_workers_running_when_it_stops() -> None:
    """Workers outlive their supervisor: systemd signals the supervisor alone, brings it
    back within the lease whatever ended it, and gives the workers no private /tmp that it
    would remove while they run; their temporary files are in the state directory, for
    Python (TMPDIR, made at every start) and for Spark's JVM (spark-defaults.conf of the
    SPARK_CONF_DIR the unit names)."""
    service = _service(SUPERVISOR_UNIT)
    assert service["KillMode"] == "process"
    assert _section(SUPERVISOR_UNIT, "Unit")["StartLimitIntervalSec"] == "0"  # never gives up
    assert "PrivateTmp" not in service
    assert float(service["RestartSec"]) < load_config(environ={}).supervisor_fence_timeout_secs
    environment = dict(
        line.removeprefix("Environment=").split("=", 1)
        for line in SUPERVISOR_UNIT.read_text().splitlines()
        if line.startswith("Environment=")
    )
    tmp = environment["TMPDIR"]
    assert tmp.startswith(f"/var/lib/{service['StateDirectory']}/")
    assert service["ExecStartPre"].split()[-1] == tmp
    spark_defaults = DEPLOY / "spark-defaults.conf"
    assert environment["SPARK_CONF_DIR"] == "/etc/stratus/spark"
    assert f"-Djava.io.tmpdir={tmp}" in spark_defaults.read_text().split()


def _conf_of(unit: Path) -> Path:
    """The example in deploy/ of the configuration a unit reads (its STRATUS_CONF)."""
    (line,) = [line for line in unit.read_text().splitlines() if "STRATUS_CONF=" in line]
    return DEPLOY / Path(line.split("STRATUS_CONF=", 1)[1].strip()).name


def _under(path: str, directories: list[str]) -> bool:
    return any(Path(path).is_relative_to(directory) for directory in directories)


@pytest.mark.parametrize(
    "unit", [u for u in UNITS if "zookeeper" not in u.name], ids=lambda p: p.name
)
def test_every_path_of_a_configuration_is_one_its_unit_provides(unit: Path) -> None:
    """The local directories of the configuration a unit reads are its StateDirectory=, its
    audit trail is in its LogsDirectory=, a local checkpoint root is in its ReadWritePaths=,
    and every file it names is in /etc/stratus, installed by a step of docs/deploy.md."""
    service = _service(unit)
    state = [f"/var/lib/{name}" for name in service.get("StateDirectory", "").split()]
    logs = [f"/var/log/{name}" for name in service.get("LogsDirectory", "").split()]
    writable = service.get("ReadWritePaths", "").split()
    settings = _settings(_conf_of(unit))
    install_lines = [line for line in DOCS.read_text().splitlines() if line.startswith("install ")]
    for key, value in settings.items():
        if key == "zookeeper.root" or not isinstance(value, str) or not value.startswith("/"):
            continue  # not a path of the host
        if key.endswith(".local.dir"):
            assert _under(value, state), (key, value, state)
        elif key == "audit.log.file":
            assert _under(value, logs), (key, value, logs)
        elif key == "pipeline.checkpoint.root":
            assert value in writable, (key, value, writable)
        else:  # a file of the operator's
            assert value.startswith("/etc/stratus/"), (key, value)
            named = [line for line in install_lines if Path(value).name in line.split()]
            assert named, f"{key}: docs/deploy.md installs no {Path(value).name}"


def test_the_zookeeper_unit_runs_the_member_of_zoo_cfg_from_its_state_directory() -> None:
    service = _service(DEPLOY / "stratus-zookeeper.service")
    zoo = dict(
        line.split("=", 1)
        for line in (DEPLOY / "zoo.cfg").read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert zoo["dataDir"] == f"/var/lib/{service['StateDirectory']}"
    argv = shlex.split(service["ExecStart"].replace("\\\n", " "))
    assert argv[:2] == ["/opt/stratus/venv/bin/stratus", "zookeeper-java"]
    assert argv[-1] == "/etc/stratus/zoo.cfg"
    assert "-Djava.security.auth.login.config=/etc/stratus/zookeeper-jaas.conf" in argv
    assert not [word for word in argv if "site-packages" in word or "python3." in word]


def test_the_worker_launcher_agrees_with_the_supervisor_example() -> None:
    launcher = yaml.safe_load((DEPLOY / "worker-launcher.cfg").read_text())
    supervisor = _settings(SUPERVISOR_CONF)
    for key in ("supervisor.local.dir", "pipeline.checkpoint.root"):
        assert launcher[key] == supervisor[key]


def test_the_pacemaker_example_listens_on_the_network_with_security_on() -> None:
    """It loads, listens on a host's address with every read and write authenticated
    (digest) over TLS, as the start-up check accepts; the files it names are read at start
    (absent here: reading them fails naming them)."""
    conf = load_config(path=str(PACEMAKER_CONF), environ={})
    settings = pacemaker_server_settings(conf)
    assert settings.host == "10.0.0.12" and settings.port == 6699
    assert settings.auth_method is AuthMethod.DIGEST and not settings.auth_insecure
    assert settings.tls is not None and settings.tls.cert and settings.tls.key
    check_server_settings(settings, {"nimbus": object()})  # type: ignore[dict-item]
    starts: list[tuple[str, Callable[[], object]]] = [
        (
            conf.pacemaker_auth_file or "",
            lambda: load_secrets(Path(conf.pacemaker_auth_file or "")),
        ),
        (settings.tls.cert or "", settings.tls.server_context),
    ]
    for file, start in starts:
        assert file
        if Path(file).exists():
            continue  # an operator's machine: the file is real
        with pytest.raises(StratusError, match=re.escape(file)):
            start()


@pytest.mark.parametrize("path", HEARTBEAT_CONFS, ids=lambda p: p.name)
def test_the_commented_pacemaker_lines_of_a_daemon_configuration_name_the_pacemakers(
    path: Path,
) -> None:
    """Uncommented, the pacemaker lines of nimbus.yaml and supervisor.yaml load and name
    the two pacemakers of the layout on pacemaker.yaml's port, with digest over TLS; the
    credentials file they name is read at start."""
    conf = config_from_mapping(_settings(path, ("# pacemaker.", "# cluster.state")))
    pacemaker = load_config(path=str(PACEMAKER_CONF), environ={})
    assert conf.cluster_state_store == "pacemaker"
    assert conf.pacemaker_servers == [f"10.0.0.1{n}:{pacemaker.pacemaker_port}" for n in (2, 3)]
    assert conf.pacemaker_auth_method == pacemaker.pacemaker_auth_method == "digest"
    assert conf.pacemaker_tls_ca and conf.pacemaker_auth_file
    assert conf.pacemaker_pulse_ttl_secs == pacemaker.pacemaker_pulse_ttl_secs
    if not Path(conf.pacemaker_auth_file).exists():
        with pytest.raises(StratusError, match=re.escape(conf.pacemaker_auth_file)):
            pacemaker_client_settings(conf)


@pytest.mark.parametrize(
    "unit", [u for u in UNITS if "zookeeper" not in u.name], ids=lambda p: p.name
)
def test_a_stratus_unit_runs_a_real_verb_with_its_configuration(unit: Path) -> None:
    service = _service(unit)
    argv = shlex.split(service["ExecStart"])
    assert argv[0].endswith("/bin/stratus") and argv[1] in main.list_commands(click.Context(main))
    (config,) = [
        line.split("STRATUS_CONF=", 1)[1].strip()
        for line in unit.read_text().splitlines()
        if line.startswith("Environment=STRATUS_CONF=")
    ]
    assert (DEPLOY / Path(config).name).is_file()  # the example of the file it reads


def test_the_zkfc_unit_starts_with_the_nimbus_of_its_host_and_stops_before_it() -> None:
    """systemd starts the nimbus with its zkfc and the zkfc after it, and stops them in the
    reverse order: the zkfc leaves the election while its nimbus still answers."""
    unit = _section(DEPLOY / "stratus-zkfc.service", "Unit")
    assert "stratus-nimbus.service" in unit["Wants"].split()
    assert {"network-online.target", "stratus-nimbus.service"} <= set(unit["After"].split())


def test_the_zkfc_example_manages_the_nimbus_of_its_host_as_the_nimbus_example_runs_it() -> None:
    """zkfc.yaml targets the nimbus of nimbus.yaml's host, in the nimbus group; the lines
    both files set agree (the same ensemble and identity in ZooKeeper, the same certificate
    and token file for the zkfc's endpoint as for the nimbus's API, TLS to ZooKeeper turned
    on by the same lines) but the client token, which is the zkfc's own, and the audit log,
    its own file; and nimbus.yaml's commented mode line puts the nimbus under it."""
    tls_lines = ("# zookeeper.ssl.", "# nimbus.tls.")
    zkfc, nimbus = _settings(ZKFC_CONF, tls_lines), _settings(NIMBUS_CONF, tls_lines)
    shared = (zkfc.keys() & nimbus.keys()) - {"client.auth.token.file", "audit.log.file"}
    assert shared >= {
        "zookeeper.servers",
        "zookeeper.root",
        "zookeeper.auth.file",
        "zookeeper.ssl.enabled",
        "nimbus.tls.cert",
        "nimbus.auth.tokens.file",
        "client.tls.ca",
    }
    assert {key: zkfc[key] for key in shared} == {key: nimbus[key] for key in shared}
    assert zkfc["client.auth.token.file"] != nimbus["client.auth.token.file"]
    assert zkfc["audit.log.file"] != nimbus["audit.log.file"]
    conf = load_config(path=str(ZKFC_CONF), environ={})
    nimbus_conf = config_from_mapping(_settings(NIMBUS_CONF, ("# nimbus.ha.mode",)))
    assert nimbus_conf.nimbus_ha_mode == "zkfc"
    settings = ZkfcSettings.from_config(conf)
    assert settings.target.address == f"{nimbus_conf.nimbus_host}:{nimbus_conf.nimbus_port}"
    assert settings.group == NIMBUS_GROUP
    assert settings.port > 0  # a fixed port, which the firewall opens


PORT_KEYS = (
    "zookeeper.server.port",
    "nimbus.port",
    "nimbus.code.port",
    "pacemaker.port",
    "ha.zkfc.port",
    "supervisor.http.port",
)


def _documented_ports(doc: Path) -> str:
    """The text of ``doc``'s ports section, up to the next section of its level or above."""
    text = doc.read_text()
    start = text.index("## Ports\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


@pytest.mark.parametrize("doc", ["deploy.md", "configuration.md"])
def test_every_daemon_listens_on_a_fixed_default_port_that_the_docs_list(doc: str) -> None:
    conf = load_config(environ={})
    defaults = {key: getattr(conf, key.replace(".", "_")) for key in PORT_KEYS}
    assert all(port > 0 for port in defaults.values()), defaults  # none picked at random
    assert len(set(defaults.values())) == len(defaults)  # one host may run them all
    ports = _documented_ports(DEPLOY.parent / "docs" / doc)
    for key, port in defaults.items():
        assert re.search(rf"`{re.escape(key)}`.*\b{port}\b|\b{port}\b.*`{re.escape(key)}`", ports)
    for zookeeper_port in (2888, 3888):  # quorum and election
        assert str(zookeeper_port) in ports
