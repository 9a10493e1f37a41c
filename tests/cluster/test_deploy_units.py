"""The systemd units of ``deploy/`` start as shipped, on a host installed as docs/deploy.md says.

- ``systemd-analyze verify`` accepts every unit, the supervisor's with its drop-in for worker
  users, without a warning (their ``stratus`` pointed at this test's venv: verify checks that
  the command exists).
- Each unit's ``ExecStart=`` (and ``ExecStartPre=``) runs as systemd runs it: as its ``User=``
  and ``Group=``, with its ``Environment=`` lines and the variables systemd adds, in ``/``,
  after the directories of its ``StateDirectory=`` and ``LogsDirectory=`` are made as
  systemd makes them (owner, mode), and after a check that every ``ReadWritePaths=`` exists
  (systemd refuses a unit whose path is missing: 226/NAMESPACE). The host's paths
  (``/etc/stratus``, ``/var/lib/stratus``, ``/var/log/stratus``, ``/srv/stratus``) are under
  a temporary root, the configurations are deploy/'s with this machine's addresses and free
  ports, and the files they name are made where they name them, as the install steps put
  them. Each daemon, against the ZooKeeper member that the ZooKeeper unit runs, becomes
  healthy (its ``/readyz``, the member's ``srvr``), writes only where its unit lets it, and
  stops on SIGTERM within ``TimeoutStopSec=``, as systemd counts a clean stop.
- A pipeline that the supervisor's unit runs keeps its temporary files in the unit's state
  directory (the unit has no ``PrivateTmp=``, and ``/tmp`` is read-only to it): its Python's
  (``TMPDIR``) and its Spark JVM's (``java.io.tmpdir``, from deploy/spark-defaults.conf).

Running the units needs root (their user, ``stratus``, is made here when missing, with the
docs' own ``useradd`` line, and removed afterwards) and an interpreter that user may run
(``tests.harness.worker_users.worker_python``); without them the tests skip, saying why.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import re
import shlex
import shutil
import signal
import ssl
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from stratus.api.records import PipelineStatus
from stratus.client import NimbusClient
from stratus.security.client_auth import ClientAuth
from stratus.security.tls import TlsSettings
from stratus.security.tokens import hash_token
from stratus.zk.fourletter import four_letter_word
from stratus.zk.ports import LOOPBACK, pick_free_port
from tests.cluster.test_deploy_zookeeper import STRATUS, SUPER
from tests.harness.tls_certs import TestCa
from tests.harness.worker_users import traversable_dir, worker_python
from tests.harness.zkfixtures import wait_until
from tests.unit.test_deploy_files import DEPLOY, UNITS

# One module at a time: it may make the host's stratus user, and removes what it made. In the
# Spark group (tests/conftest.py), as one of its tests runs Spark: a group of its own would
# run beside the Spark group.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("spark")]

USER = "stratus"
DOCS = DEPLOY.parent / "docs" / "deploy.md"
VENV = "/opt/stratus/venv"
# The host's directories that the units and configurations name, moved under a test's root.
HOST_DIRS = ("/etc/stratus", "/var/lib/stratus", "/var/log/stratus", "/srv/stratus")
# systemd's directories by kind, and the variable that tells the service each one.
DIRECTORY_KINDS = {
    "StateDirectory": ("/var/lib", "STATE_DIRECTORY"),
    "LogsDirectory": ("/var/log", "LOGS_DIRECTORY"),
    "RuntimeDirectory": ("/run", "RUNTIME_DIRECTORY"),
    "CacheDirectory": ("/var/cache", "CACHE_DIRECTORY"),
}
SYSTEMD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
START_SECS = 120.0
READ_TOKEN = "read-token-for-the-daemons-0123456789"
ADMIN_TOKEN = "admin-token-for-the-zkfcs-0123456789"
PACEMAKER_SECRET = "pacemaker-secret-0123456789abcdef"

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("useradd") is None,
    reason="runs each unit as its User= (stratus), made with useradd: needs root",
)


# ------------------------------------------------------------------------- reading a unit


@dataclass(frozen=True)
class Unit:
    """The settings of a unit file as systemd reads them: every assignment of a key, in
    order (``Environment=`` may be given many times), lines continued with a backslash."""

    path: Path
    settings: dict[tuple[str, str], list[str]] = field(default_factory=dict)

    @classmethod
    def read(cls, path: Path) -> Unit:
        unit = cls(path)
        section = ""
        text = path.read_text().replace("\\\n", " ")
        for raw in text.splitlines():
            line = raw.strip()
            if not line or line.startswith(("#", ";")):
                continue
            if line.startswith("["):
                section = line.strip("[]")
                continue
            key, value = line.split("=", 1)
            unit.settings.setdefault((section, key.strip()), []).append(value.strip())
        return unit

    def all(self, key: str) -> list[str]:
        return self.settings.get(("Service", key), [])

    def one(self, key: str, default: str = "") -> str:
        values = self.all(key)
        return values[-1] if values else default

    def environment(self) -> dict[str, str]:
        pairs = [
            word.split("=", 1) for line in self.all("Environment") for word in shlex.split(line)
        ]
        return dict(pairs)


# ----------------------------------------------------------------------- verifying a unit


def _units_for_verify(directory: Path) -> Path:
    """deploy/'s units and drop-ins in ``directory``, their stratus the one of this venv."""
    bin_dir = Path(sys.executable).parent
    for path in [*UNITS, *DEPLOY.glob("*.service.d/*.conf")]:
        target = directory / path.relative_to(DEPLOY)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(path.read_text().replace(f"{VENV}/bin/", f"{bin_dir}/"))
    return directory


@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_systemd_analyze_verify_accepts_the_unit(unit: Path, tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("no systemd-analyze here (Debian: apt-get install systemd)")
    if not (Path(sys.executable).parent / "stratus").exists():
        pytest.skip(f"no stratus command beside {sys.executable}: verify checks ExecStart=")
    directory = _units_for_verify(tmp_path / "units")
    done = subprocess.run(
        [analyze, "verify", "--man=no", str(directory / unit.name)],
        env={**os.environ, "SYSTEMD_UNIT_PATH": f"{directory}:"},  # its drop-ins, if any
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (done.returncode, done.stdout + done.stderr) == (0, "")


def test_verify_would_see_a_bad_setting_of_a_drop_in(tmp_path: Path) -> None:
    """The check above reads the drop-ins: a key systemd does not know is reported."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("no systemd-analyze here (Debian: apt-get install systemd)")
    directory = _units_for_verify(tmp_path / "units")
    (directory / "stratus-supervisor.service.d" / "bad.conf").write_text("[Service]\nKilMode=x\n")
    done = subprocess.run(
        [analyze, "verify", "--man=no", str(directory / "stratus-supervisor.service")],
        env={**os.environ, "SYSTEMD_UNIT_PATH": f"{directory}:"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "Unknown key 'KilMode'" in done.stderr


# ------------------------------------------------------------------- a host, systemd-like


@dataclass
class Host:
    """A host installed as docs/deploy.md says, under ``root``; runs units as systemd."""

    root: Path
    python: str  # one the unit's user may run, with stratus
    uid: int
    gid: int
    home: str
    ca: TestCa
    running: list[subprocess.Popen[bytes]] = field(default_factory=list)
    owned_before: dict[Path, set[Path]] = field(default_factory=dict)  # by unit, at its start
    installed: set[Path] = field(default_factory=set)  # the operator's files
    units: dict[int, Unit] = field(default_factory=dict)  # the running ones, by pid
    beside: dict[Path, list[Unit]] = field(default_factory=dict)  # each, and those run with it

    def path(self, host_path: str) -> Path:
        """Where ``host_path`` (``/etc/stratus/zoo.cfg``) is in this test."""
        return self.root / host_path.lstrip("/")

    def mapped(self, text: str) -> str:
        """``text`` with every host directory moved under the root."""
        for prefix in HOST_DIRS:
            text = re.sub(rf"(?<![\w/]){re.escape(prefix)}(?=/|\b)", str(self.path(prefix)), text)
        return text

    def install(self, host_path: str, text: str, mode: int = 0o600) -> None:
        """``install -o stratus -g stratus -m MODE``: a file of the operator's."""
        path = self.path(host_path)
        path.write_text(text)
        self.installed.add(path)
        os.chown(path, self.uid, self.gid)
        path.chmod(mode)

    def command(self, line: str) -> list[str]:
        """An ``Exec*=`` line as argv: the venv's ``stratus`` is ``python -m stratus``."""
        argv = [self.mapped(word) for word in shlex.split(line)]
        if argv[0] == f"{VENV}/bin/stratus":
            argv[:1] = [self.python, "-m", "stratus"]
        return argv

    def start(self, unit: Unit, log: Path) -> subprocess.Popen[bytes]:
        """What systemd does to start ``unit``: its directories, its paths checked, its
        ``ExecStartPre=`` then ``ExecStart=`` as its user, with its environment."""
        assert unit.one("User") == unit.one("Group") == USER
        self.owned_before[unit.path] = self._owned()
        env = {
            "PATH": SYSTEMD_PATH,
            "HOME": self.mapped(self.home),
            "USER": USER,
            "LOGNAME": USER,
            "SHELL": "/usr/sbin/nologin",
            "LANG": "C.UTF-8",
        }
        for kind, (base, variable) in DIRECTORY_KINDS.items():
            names = [name for line in unit.all(kind) for name in line.split()]
            mode = int(unit.one(f"{kind}Mode", "0755"), 8)
            for name in names:
                directory = self.path(f"{base}/{name}")
                directory.parent.mkdir(parents=True, exist_ok=True)  # root's, 0755
                directory.mkdir(exist_ok=True)
                os.chown(directory, self.uid, self.gid)
                directory.chmod(mode)
            if names:
                env[variable] = ":".join(str(self.path(f"{base}/{n}")) for n in names)
        for line in unit.all("ReadWritePaths"):
            for word in line.split():
                path = self.path(word.lstrip("-"))
                assert word.startswith("-") or path.exists(), (
                    f"{unit.path.name}: ReadWritePaths={word} does not exist after the install "
                    "steps: systemd refuses the unit (226/NAMESPACE)"
                )
        env.update({key: self.mapped(value) for key, value in unit.environment().items()})
        for line in unit.all("ExecStartPre"):
            done = self._run(self.command(line), env, log)
            assert done.wait(timeout=60) == 0, log.read_text()[-2000:]
        process = self._run(self.command(unit.one("ExecStart")), env, log)
        self.running.append(process)
        self.beside[unit.path] = [unit, *self.units.values()]
        for other in self.units.values():
            self.beside[other.path].append(unit)
        self.units[process.pid] = unit
        return process

    def _run(self, argv: list[str], env: Mapping[str, str], log: Path) -> subprocess.Popen[bytes]:
        with log.open("ab") as out:
            return subprocess.Popen(
                argv,
                cwd="/",
                env=dict(env),
                user=self.uid,
                group=self.gid,
                extra_groups=[],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def stop(self, unit: Unit, process: subprocess.Popen[bytes]) -> bool:
        """SIGTERM, as ``systemctl stop``: whether it ended, within ``TimeoutStopSec=``, as
        systemd counts a clean stop (0, death by SIGTERM, or a ``SuccessExitStatus=``)."""
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=float(unit.one("TimeoutStopSec", "90")))
        self.running.remove(process)
        del self.units[process.pid]
        clean = {0, -signal.SIGTERM, *(int(c) for c in unit.one("SuccessExitStatus").split())}
        return code in clean

    def _owned(self) -> set[Path]:
        """Every file of the units' user under the root."""
        return {
            Path(directory, name)
            for directory, _, names in os.walk(self.root)
            for name in names
            if Path(directory, name).lstat().st_uid == self.uid
        }

    def writable(self, unit: Unit) -> list[Path]:
        """What ``unit`` may write: its own directories and its ``ReadWritePaths=``."""
        paths = [
            self.path(f"{base}/{name}")
            for kind, (base, _) in DIRECTORY_KINDS.items()
            for line in unit.all(kind)
            for name in line.split()
        ]
        return paths + [
            self.path(word.lstrip("-"))
            for line in unit.all("ReadWritePaths")
            for word in line.split()
        ]

    def written_outside(self, unit: Unit) -> list[Path]:
        """Files the units' user made under the root since ``unit`` started, outside what
        ``unit`` may write (and the units that ran beside it, checked each on its own)."""
        writable = [path for other in self.beside[unit.path] for path in self.writable(other)]
        made = self._owned() - self.owned_before[unit.path] - self.installed
        return sorted(path for path in made if not any(path.is_relative_to(d) for d in writable))


@contextlib.contextmanager
def _the_user() -> Iterator[pwd.struct_passwd]:
    """The units' user: this host's, else made with the docs' own line, removed afterwards."""
    try:
        existing = pwd.getpwnam(USER)
    except KeyError:
        existing = None
    if existing is not None:
        yield existing
        return
    line = next(line for line in DOCS.read_text().splitlines() if line.startswith("useradd "))
    subprocess.run(shlex.split(line), check=True, capture_output=True)
    try:
        yield pwd.getpwnam(USER)
    finally:
        subprocess.run(["userdel", USER], check=False, capture_output=True)


@pytest.fixture(scope="module")
def host() -> Iterator[Host]:
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        pytest.skip("runs each unit as its User= (stratus), made with useradd: needs root")
    with _the_user() as user, traversable_dir() as base:
        python = worker_python(base)
        root = base / "root"
        root.mkdir()
        host = Host(root, python, user.pw_uid, user.pw_gid, user.pw_dir, TestCa(base / "ca"))
        _install(host)
        try:
            yield host
        finally:
            for process in host.running:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def _host_steps() -> list[str]:
    """The lines of docs/deploy.md's shell block that installs a host."""
    text = DOCS.read_text()
    block = re.search(r"\*\*The host\.\*\*.*?```sh\n(.*?)```", text, flags=re.DOTALL)
    assert block, "docs/deploy.md has no install block after **The host.**"
    return block[1].splitlines()


def _install(host: Host) -> None:
    """docs/deploy.md's install steps, under the root: its directories (``install -d``) and
    ``myid`` as written, deploy/spark-defaults.conf, and the operator's files that the
    configurations name (the configurations themselves come with each test)."""
    host.root.chmod(0o755)
    for line in _host_steps():
        argv = [host.mapped(word) for word in shlex.split(line)]
        if argv[:2] == ["install", "-d"]:
            subprocess.run(argv, check=True)
        elif argv[0] == "echo":
            Path(argv[-1]).write_text(f"{argv[1]}\n")  # echo 1 > .../myid
    assert host.path("/var/lib/stratus/zookeeper/myid").read_text() == "1\n"
    host.path("/etc/stratus/spark/spark-defaults.conf").write_text(
        host.mapped((DEPLOY / "spark-defaults.conf").read_text())
    )
    ca = host.ca
    issued = ca.issue("host1", ip=LOOPBACK)
    files = {
        "/etc/stratus/zookeeper.secret": f"{STRATUS.user}:{STRATUS.password}\n",
        "/etc/stratus/tokens": f"read token {hash_token(READ_TOKEN)} principal=nodes\n"
        f"admin token {hash_token(ADMIN_TOKEN)} principal=zkfc\n",
        "/etc/stratus/node-token": f"{READ_TOKEN}\n",
        "/etc/stratus/zkfc-token": f"{ADMIN_TOKEN}\n",
        "/etc/stratus/nimbus-ca.pem": ca.cert.read_text(),
        "/etc/stratus/pacemaker.secrets": f"nimbus nimbus {PACEMAKER_SECRET}\n",
        "/etc/stratus/pacemaker.pem": issued.cert.read_text(),
        "/etc/stratus/pacemaker.key": issued.key.read_text(),
    }
    for name in ("nimbus-10.0.0.11.pem", "nimbus-10.0.0.11-key.pem"):
        source = issued.key if name.endswith("-key.pem") else issued.cert
        files[f"/etc/stratus/{name}"] = source.read_text()
    for host_path, text in files.items():
        host.install(host_path, text)


# --------------------------------------------------------------------- the configurations


def _configuration(host: Host, name: str, values: Mapping[str, Any]) -> None:
    """deploy/``name`` with this machine's ``values``, installed where its unit reads it."""
    settings = yaml.safe_load((DEPLOY / name).read_text())
    settings.update(values)
    text = host.mapped(yaml.safe_dump(settings, sort_keys=False))
    host.install(f"/etc/stratus/{name}", text)


@dataclass
class Ensemble:
    """The member that the ZooKeeper unit runs: its connect string."""

    hosts: str


@pytest.fixture(scope="module")
def zookeeper(host: Host, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ensemble]:
    """deploy/zoo.cfg as one member on loopback (a one-member quorum), deploy's JAAS file
    with its passwords, run by the ZooKeeper unit."""
    port, quorum, election = pick_free_port(), pick_free_port(), pick_free_port()
    lines = [
        line
        for line in (DEPLOY / "zoo.cfg").read_text().splitlines()
        if not line.startswith(("server.", "clientPort"))
    ]
    lines += [
        f"clientPort={port}",
        f"clientPortAddress={LOOPBACK}",
        f"server.1={LOOPBACK}:{quorum}:{election}",
    ]
    host.install("/etc/stratus/zoo.cfg", host.mapped("\n".join(lines) + "\n"))
    jaas = (DEPLOY / "zookeeper-jaas.conf").read_text()
    jaas = re.sub(r'user_stratus="[^"]*"', f'user_stratus="{STRATUS.password}"', jaas)
    jaas = re.sub(r'user_super="[^"]*"', f'user_super="{SUPER.password}"', jaas)
    host.install("/etc/stratus/zookeeper-jaas.conf", jaas)
    unit = Unit.read(DEPLOY / "stratus-zookeeper.service")
    log = tmp_path_factory.mktemp("zookeeper") / "unit.log"
    process = host.start(unit, log)

    def serving() -> bool:
        assert process.poll() is None, log.read_text()[-3000:]
        try:
            return "Mode: " in four_letter_word(LOOPBACK, port, "srvr", 1.0)
        except OSError:
            return False

    wait_until(serving, START_SECS, "the ZooKeeper unit to serve")
    yield Ensemble(f"{LOOPBACK}:{port}")
    assert host.stop(unit, process)


def _ready(host: Host, port: int, probe: str = "/readyz") -> bool:
    context = ssl.create_default_context(cafile=str(host.ca.cert))
    try:
        answer = httpx.get(f"https://{LOOPBACK}:{port}{probe}", verify=context, timeout=2.0)
    except httpx.HTTPError:
        return False
    return answer.status_code == 200


def _run_until_ready(
    host: Host, name: str, log_dir: Path, port: int, probe: str = "/readyz"
) -> tuple[Unit, subprocess.Popen[bytes]]:
    unit = Unit.read(DEPLOY / f"stratus-{name}.service")
    log = log_dir / f"{name}.log"
    process = host.start(unit, log)

    def ready() -> bool:
        assert process.poll() is None, log.read_text()[-3000:]
        return _ready(host, port, probe)

    wait_until(ready, START_SECS, f"the {name} unit's {probe}")
    return unit, process


def _stops(host: Host, unit: Unit, process: subprocess.Popen[bytes]) -> None:
    assert host.written_outside(unit) == []
    assert host.stop(unit, process)


@needs_root
def test_the_zookeeper_unit_serves_from_its_state_directory(
    host: Host, zookeeper: Ensemble
) -> None:
    data = host.path("/var/lib/stratus/zookeeper")
    assert (data / "version-2").is_dir()  # dataDir of zoo.cfg: its StateDirectory=
    assert (data.stat().st_uid, data.stat().st_mode & 0o777) == (host.uid, 0o700)
    assert host.written_outside(Unit.read(DEPLOY / "stratus-zookeeper.service")) == []


def _nimbus_conf(host: Host, zookeeper: Ensemble, **values: Any) -> int:
    """nimbus.yaml on this machine's loopback, with ``values``; its API's port."""
    port = pick_free_port()
    _configuration(
        host,
        "nimbus.yaml",
        {
            "zookeeper.servers": [zookeeper.hosts],
            "nimbus.host": LOOPBACK,
            "nimbus.bind.host": LOOPBACK,
            "nimbus.port": port,
            "nimbus.code.port": pick_free_port(),
            "nimbus.seeds": [f"{LOOPBACK}:{port}"],
            "pipeline.min.replication.count": 1,
            "ha.zkfc.port": pick_free_port(),
            **values,
        },
    )
    return port


def _supervisor_conf(host: Host, zookeeper: Ensemble, nimbus_port: int) -> int:
    """supervisor.yaml on this machine's loopback; its endpoint's port."""
    http_port = pick_free_port()
    _configuration(
        host,
        "supervisor.yaml",
        {
            "zookeeper.servers": [zookeeper.hosts],
            "supervisor.host": LOOPBACK,
            "supervisor.http.port": http_port,
            "nimbus.seeds": [f"{LOOPBACK}:{nimbus_port}"],
        },
    )
    return http_port


@needs_root
def test_the_nimbus_unit_serves_under_its_controller_and_stops(
    host: Host, zookeeper: Ensemble, tmp_path: Path
) -> None:
    """As shipped (nimbus.ha.mode supervised): the unit's main process is the controller,
    whose endpoint answers on ha.zkfc.port, and its nimbus child serves the API."""
    controller_port = pick_free_port()
    port = _nimbus_conf(host, zookeeper, **{"ha.zkfc.port": controller_port})
    nimbus = _run_until_ready(host, "nimbus", tmp_path, port)
    wait_until(lambda: _ready(host, controller_port), START_SECS, "the controller's /readyz")
    _stops(host, *nimbus)


@needs_root
def test_the_nimbus_and_zkfc_units_serve_and_stop(
    host: Host, zookeeper: Ensemble, tmp_path: Path
) -> None:
    port = _nimbus_conf(host, zookeeper, **{"nimbus.ha.mode": "zkfc"})
    nimbus = _run_until_ready(host, "nimbus", tmp_path, port)
    zkfc_port = pick_free_port()
    _configuration(
        host,
        "zkfc.yaml",
        {
            "zookeeper.servers": [zookeeper.hosts],
            "ha.zkfc.target": f"{LOOPBACK}:{port}",
            "ha.zkfc.port": zkfc_port,
        },
    )
    zkfc = _run_until_ready(host, "zkfc", tmp_path, zkfc_port, "/healthz")
    _stops(host, *zkfc)
    _stops(host, *nimbus)


@needs_root
def test_the_supervisor_unit_registers_and_stops(
    host: Host, zookeeper: Ensemble, tmp_path: Path
) -> None:
    http_port = _supervisor_conf(host, zookeeper, pick_free_port())
    unit, process = _run_until_ready(host, "supervisor", tmp_path, http_port)
    tmp = host.path(unit.environment()["TMPDIR"])
    assert tmp.is_dir() and tmp.stat().st_mode & 0o7777 == 0o1777  # its ExecStartPre=
    _stops(host, unit, process)


PROBE = "tmp-probe"
PROBE_SOURCE = """\
import json
import os


def run(spark, context):
    out = context.conf["spark.stratus.test.output"]
    spark.range(3).write.mode("overwrite").parquet(f"{out}/rows")  # snappy: a native library
    jvm_tmp = spark.sparkContext._jvm.java.lang.System.getProperty("java.io.tmpdir")
    seen = {"TMPDIR": os.environ.get("TMPDIR"), "java.io.tmpdir": jvm_tmp}
    with open(f"{out}/seen.json", "w") as file:
        json.dump(seen, file)
"""


@needs_root
@pytest.mark.spark
@pytest.mark.timeout(600)
def test_a_worker_of_the_supervisor_unit_keeps_its_temporary_files_in_the_state_directory(
    host: Host, zookeeper: Ensemble, tmp_path: Path
) -> None:
    """No PrivateTmp=, /tmp read-only: a worker's Python (TMPDIR) and its Spark JVM
    (java.io.tmpdir, from the SPARK_CONF_DIR the unit names) use the state directory's tmp,
    and Spark writes parquet with snappy from there."""
    nimbus_port = _nimbus_conf(host, zookeeper)
    nimbus = _run_until_ready(host, "nimbus", tmp_path, nimbus_port)
    http_port = _supervisor_conf(host, zookeeper, nimbus_port)
    supervisor = _run_until_ready(host, "supervisor", tmp_path, http_port)
    package = tmp_path / "probe"
    package.mkdir()
    (package / "stratus.yaml").write_text(f"name: {PROBE}\nkind: app\nentrypoint: probe:run\n")
    (package / "probe.py").write_text(PROBE_SOURCE)
    out = host.path("/srv/stratus/checkpoints") / "probe-output"
    auth = ClientAuth(token=ADMIN_TOKEN, tls=TlsSettings(ca=str(host.ca.cert)))
    with NimbusClient([f"{LOOPBACK}:{nimbus_port}"], auth=auth) as client:
        client.submit(None, package, {"spark.stratus.test.output": str(out)})

        def finished() -> bool:
            record = client.status(PROBE)
            assert record.status is not PipelineStatus.FAILED, record.reason
            return record.status is PipelineStatus.FINISHED

        wait_until(finished, START_SECS * 3, f"{PROBE} to finish")
    tmp = str(host.path(supervisor[0].environment()["TMPDIR"]))
    assert json.loads((out / "seen.json").read_text()) == {"TMPDIR": tmp, "java.io.tmpdir": tmp}
    assert list((out / "rows").glob("*.snappy.parquet"))
    _stops(host, *supervisor)
    _stops(host, *nimbus)


@needs_root
def test_the_pacemaker_unit_serves_and_stops(host: Host, tmp_path: Path) -> None:
    port = pick_free_port()
    _configuration(host, "pacemaker.yaml", {"pacemaker.host": LOOPBACK, "pacemaker.port": port})
    _stops(host, *_run_until_ready(host, "pacemaker", tmp_path, port, "/healthz"))
