"""``stratus nimbus``: run one nimbus until SIGTERM or SIGINT, then hand leadership over; on
SIGHUP it reads its token file again.

In ``nimbus.ha.mode: supervised`` (the default) the command is the nimbus's failover
controller, which runs the same command line as its child (``stratus.ha.supervised_nimbus``):
the child, marked by its environment, serves as a nimbus in ``zkfc`` mode, prints the
``nimbus <address> serving ...`` line, and stops with its controller (SIGTERM: the controller
leaves the election first, then stops it; if the controller dies, the child's stdin closes
and it exits at once). In
``self`` and ``zkfc`` modes the command is the nimbus alone.
"""

from __future__ import annotations

import logging
import os
import signal
import sys

import click

from stratus.cli.daemon_run import run_daemon
from stratus.cli.options import log_level_option, with_config
from stratus.cli.zkfc_command import check_zkfc
from stratus.client_settings import client_auth
from stratus.config import StratusConfig
from stratus.ha.daemon import Zkfc
from stratus.ha.settings import SupervisedNimbusSettings
from stratus.ha.supervised_nimbus import CONTROLLER_ENV, controller_credentials, controller_plan
from stratus.ha.zkfc_endpoint import EndpointSecurity
from stratus.logs import configure_daemon_logging
from stratus.nimbus.daemon import Nimbus
from stratus.nimbus.http.exposure import check_exposure
from stratus.nimbus.settings import NimbusSettings
from stratus.process import watch_for_eof
from stratus.rlimits import raise_open_files_limit
from stratus.settings import (
    access_policy,
    audit_log,
    http_bounds,
    log_settings,
    server_tls,
    zk_settings,
)
from stratus.zk.session import ZkSession

log = logging.getLogger(__name__)


@click.command()
@click.option(
    "--insecure",
    is_flag=True,
    help="Serve an unauthenticated API on a non-loopback address (nimbus.auth.insecure).",
)
@log_level_option
@with_config
def nimbus(conf: StratusConfig, insecure: bool) -> None:
    """Run a nimbus: the HTTP API, and a place in the leader election.

    By default (nimbus.ha.mode supervised) this process is the nimbus's failover controller
    and runs the nimbus as its child: a leader that dies is failed over as soon as it exits,
    one that hangs after the health timeout (ha.health.rpc.timeout.secs).
    """
    configure_daemon_logging(log_settings(conf))
    audit_log(conf)
    if insecure:
        conf = conf.model_copy(update={"nimbus_auth_insecure": True})
    raise_open_files_limit()  # a supervised nimbus inherits it
    controller = os.environ.get(CONTROLLER_ENV)
    if conf.nimbus_ha_mode == "supervised" and controller is None:
        _run_controller(conf)
        return
    fixed = None
    if controller is not None:  # the child of a supervised nimbus's controller
        conf = conf.model_copy(update={"nimbus_ha_mode": "zkfc"})
        fixed = controller_credentials(controller)
        watch_for_eof(sys.stdin.fileno(), _controller_gone)
    scheme = "https" if conf.nimbus_tls_cert else "http"
    run_daemon(
        Nimbus(NimbusSettings.from_config(conf, fixed=fixed)),
        ready=lambda d: f"nimbus {d.address} serving {scheme}://{d.address}/",
        reload=lambda d: d.policy.reload(),
    )


def _controller_gone() -> None:
    """The controller died (its end of our stdin closed): go at once, as if killed with it.

    Nobody would stop or fence this nimbus any more, and a graceful stop may wait on a
    ZooKeeper that is gone with the rest; its writes are fenced by its term's epoch, and its
    registration goes with its session.
    """
    log.error("event=controller_gone pid=%d action=exit", os.getpid())
    os.kill(os.getpid(), signal.SIGKILL)


def _run_controller(conf: StratusConfig) -> None:
    """The failover controller of this host's nimbus, which it runs as its child.

    A child that exits before it ever answered (its configuration, a busy port: what a
    restart would repeat) ends the command with its exit code, its error already printed.
    """
    auth = client_auth(conf)
    policy = access_policy(conf)  # TokenFileError if the file is unsafe or malformed
    check_exposure(
        conf.nimbus_bind(), authenticated=policy.enabled, insecure=conf.nimbus_auth_insecure
    )
    plan = controller_plan(SupervisedNimbusSettings.from_config(conf), sys.argv[1:], auth)
    security = EndpointSecurity(
        policy, server_tls(conf), http_bounds(conf), conf.nimbus_max_request_bytes
    )
    daemon = Zkfc(
        plan.settings,
        ZkSession(zk_settings(conf)),
        auth,
        security,
        service_auth=plan.service_auth,
    )

    def check(zkfc: Zkfc) -> None:
        check_zkfc(zkfc)
        if zkfc.start_failure is not None:
            log.error("event=nimbus_start_failed code=%d", zkfc.start_failure)
            raise click.exceptions.Exit(zkfc.start_failure)

    def reload(zkfc: Zkfc) -> None:
        security.policy.reload()
        if zkfc.supervision is not None:
            zkfc.supervision.signal(signal.SIGHUP)

    run_daemon(
        daemon,
        ready=lambda d: (
            f"nimbus controller: managing {d.settings.target.address} in group "
            f"{d.settings.group}, endpoint {d.endpoint.address if d.endpoint else 'none'}"
        ),
        check=check,
        period_secs=0.2,
        reload=reload,
    )
