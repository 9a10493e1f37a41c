"""``stratus zookeeper``: a real ZooKeeper server (or a loopback quorum) until SIGINT/SIGTERM.

Once it accepts clients it prints exactly one line, ``zookeeper: serving at <connect string>``,
which scripts and tests wait for; on SIGINT or SIGTERM it stops the JVM(s) cleanly and exits 0::

    $ stratus zookeeper --port 2181 --data-dir /var/lib/stratus/zookeeper
    zookeeper: serving at 127.0.0.1:2181
    $ stratus zookeeper --ensemble 3 --port 0 --temporary
    zookeeper: serving at 127.0.0.1:21001,127.0.0.1:17342,127.0.0.1:28713

Its data is durable by default: kept in ``~/.stratus/zookeeper`` (or ``--data-dir``) and
fsynced before every acknowledgement; ``--temporary`` is the throw-away alternative.

``stratus zookeeper-java`` runs ``java`` with ZooKeeper's jars (those of the installed pyspark
wheel) as its classpath, in its own process: a member of an ensemble from the operator's
``zoo.cfg`` (``deploy/stratus-zookeeper.service``), or ZooKeeper's own CLI::

    $ stratus zookeeper-java -Xmx1g org.apache.zookeeper.server.quorum.QuorumPeerMain zoo.cfg
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import click

from stratus.cli.options import log_level_option, with_config
from stratus.config import StratusConfig
from stratus.logs import configure_daemon_logging
from stratus.rlimits import raise_open_files_limit
from stratus.security.loopback import is_loopback
from stratus.settings import log_settings, zk_server_auth, zk_server_tls
from stratus.zk.auth import ServerAuth
from stratus.zk.ensemble import ZooKeeperEnsemble
from stratus.zk.errors import ZooKeeperServerError
from stratus.zk.java import java_command
from stratus.zk.ports import LOOPBACK
from stratus.zk.server import MAX_TICK_TIME_MS, ZooKeeperServer

LIVENESS_CHECK_SECS = 0.5
DEFAULT_DATA_DIR = Path("~/.stratus/zookeeper")
MAX_ENSEMBLE = 9  # members on loopback; a quorum of more only adds latency
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@click.command("zookeeper")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Client port (default: zookeeper.server.port; 0 picks a free one). With --ensemble, "
    "the first server's client port.",
)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Data directory, kept after exit (default: zookeeper.server.data.dir, else "
    "~/.stratus/zookeeper).",
)
@click.option(
    "--temporary",
    is_flag=True,
    help="Keep the data in a fresh temporary directory removed at exit, without fsync "
    "(tests and demos: nothing survives).",
)
@click.option(
    "--host",
    default=None,
    help="Address to listen on for clients (default: zookeeper.server.host, 127.0.0.1; "
    "0.0.0.0 for every interface).",
)
@click.option(
    "--require-auth",
    is_flag=True,
    default=None,
    help="Refuse every request of a client that has not authenticated (default: "
    "zookeeper.server.auth.required).",
)
@click.option(
    "--insecure",
    is_flag=True,
    default=None,
    help="Listen on a non-loopback --host without requiring authentication, on purpose "
    "(default: zookeeper.server.auth.insecure): anyone who reaches it may read and write.",
)
@click.option(
    "--tick-time",
    "tick_time_ms",
    type=click.IntRange(min=1, max=MAX_TICK_TIME_MS),
    default=None,
    help="ZooKeeper tickTime in ms (default: zookeeper.server.tick.time.ms); the minimum "
    "session timeout is two ticks.",
)
@click.option(
    "--ensemble",
    "ensemble_size",
    type=click.IntRange(min=1, max=MAX_ENSEMBLE),
    default=None,
    help="Run N quorum servers on loopback instead of one standalone server (each with a "
    "secure port of its own when zookeeper.server.secure.port is set).",
)
@log_level_option
@with_config
def zookeeper(  # noqa: PLR0913 click passes each option
    *,
    conf: StratusConfig,
    port: int | None,
    data_dir: Path | None,
    temporary: bool,
    host: str | None,
    require_auth: bool | None,
    insecure: bool | None,
    tick_time_ms: int | None,
    ensemble_size: int | None,
) -> None:
    """Run a real ZooKeeper server on this machine until SIGINT or SIGTERM."""
    configure_daemon_logging(log_settings(conf))
    raise_open_files_limit()  # the ZooKeeper servers it starts inherit it
    port = conf.zookeeper_server_port if port is None else port
    tick_time_ms = tick_time_ms or conf.zookeeper_server_tick_time_ms
    host = host or conf.zookeeper_server_host
    if temporary and data_dir is not None:
        raise click.UsageError("--temporary and --data-dir exclude each other")
    if data_dir is None and not temporary:
        data_dir = Path(conf.zookeeper_server_data_dir or DEFAULT_DATA_DIR).expanduser()
    if require_auth:
        conf = conf.model_copy(update={"zookeeper_server_auth_required": True})
    auth = zk_server_auth(conf)
    force_sync = conf.zookeeper_server_force_sync and not temporary
    tls = zk_server_tls(conf)
    with contextlib.ExitStack() as stack:
        stop_requested = stack.enter_context(_stop_signals())
        if data_dir is None:
            tmp = tempfile.TemporaryDirectory(prefix="stratus-zookeeper-")
            data_dir = Path(stack.enter_context(tmp))
        if ensemble_size:
            if host != LOOPBACK:
                raise click.UsageError(
                    "--ensemble runs on loopback only: leave out --host (for an ensemble "
                    "across hosts, run one member per host: see docs/deploy.md)"
                )
            ensemble = ZooKeeperEnsemble(
                data_dir,
                ensemble_size,
                tick_time_ms=tick_time_ms,
                port=port,
                force_sync=force_sync,
                auth=auth,
                tls=tls,
            )
            servers = ensemble.servers
            stack.enter_context(ensemble)
            connect_string = ensemble.connect_string
        else:
            server = ZooKeeperServer(  # checks the host before it is judged
                data_dir,
                port,
                tick_time_ms=tick_time_ms,
                host=host,
                force_sync=force_sync,
                auth=auth,
                tls=tls,
            )
            insecure = conf.zookeeper_server_auth_insecure or bool(insecure)
            _refuse_open_exposure(host, auth, insecure)
            servers = [server]
            stack.enter_context(server)
            connect_string = server.connect_string
        click.echo(f"zookeeper: serving at {connect_string}")
        secure = [server.secure_connect_string for server in servers]
        if all(secure):  # stderr: stdout's one line is what scripts wait for
            click.echo(f"zookeeper: TLS at {','.join(filter(None, secure))}", err=True)
        sys.stdout.flush()  # the line scripts wait for must not sit in a buffer
        _serve_until_stopped(stop_requested, servers)


@click.command(
    "zookeeper-java",
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@click.argument(
    "java_args",
    nargs=-1,
    required=True,
    type=click.UNPROCESSED,
    metavar="[JVM_OPTION]... MAIN_CLASS [ARG]...",
)
def zookeeper_java(java_args: tuple[str, ...]) -> None:
    """Run Java with the ZooKeeper jars of the installed pyspark as its classpath.

    The arguments are java's: JVM options (one word each, -Dkey=value), a main class such as
    org.apache.zookeeper.server.quorum.QuorumPeerMain (an ensemble member, from its zoo.cfg)
    or org.apache.zookeeper.ZooKeeperMain (ZooKeeper's CLI), and its arguments. Java (17+,
    JAVA_HOME or the PATH's) takes this process's place: its signals, its exit code.
    """
    command = java_command(java_args)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(command[0], command)


def _refuse_open_exposure(host: str, auth: ServerAuth, insecure: bool) -> None:
    """A server that others can reach requires authentication, unless told otherwise."""
    if auth.required or is_loopback(host):
        return
    if not insecure:
        raise click.UsageError(
            f"zookeeper refuses to listen on {host} without authentication: pass "
            "--require-auth with zookeeper.auth.file naming stratus's user:password (see "
            "docs/zookeeper.md), or --insecure (zookeeper.server.auth.insecure=true) to run an "
            "open server on purpose"
        )
    click.echo(
        f"zookeeper: INSECURE: listening on {host} without authentication; anyone who "
        "reaches it may read and write every znode",
        err=True,
    )


def _serve_until_stopped(stop_requested: threading.Event, servers: list[ZooKeeperServer]) -> None:
    """Wait for a stop signal; fail if every server has died under us.

    One dead member of an ensemble is not an error: killing members is how failover is tried.
    """
    while not stop_requested.wait(LIVENESS_CHECK_SECS):
        if not any(server.is_running() for server in servers):
            logs = ", ".join(str(server.log_path) for server in servers)
            raise ZooKeeperServerError(f"ZooKeeper exited unexpectedly; see {logs}")


@contextlib.contextmanager
def _stop_signals() -> Iterator[threading.Event]:
    """An event set by SIGINT/SIGTERM while the block runs; the old handlers come back after.

    The handler only sets the event, so a signal during start-up lets the start finish and the
    server is then stopped by the normal path (no JVM half-started, none left behind).
    """
    requested = threading.Event()

    def handle(signum: int, frame: FrameType | None) -> None:
        requested.set()

    previous = {signum: signal.signal(signum, handle) for signum in STOP_SIGNALS}
    try:
        yield requested
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
