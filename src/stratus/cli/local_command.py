"""``stratus local``: a whole HA stratus cluster on this machine, running the examples on Spark.

What it runs and shows is ``stratus.local.demo``; this module is the command around it.
"""

from __future__ import annotations

import signal
from contextlib import ExitStack

import click
from rich.console import Console

from stratus.cli.cluster_view import print_cluster
from stratus.cli.options import log_level_option, with_config
from stratus.config import StratusConfig
from stratus.local.cluster import HA_MODES, INTERRUPTS
from stratus.local.demo import (
    Demo,
    DemoError,
    print_summary,
    run_scripted,
    run_until_interrupted,
)
from stratus.local.user_settings import UserSettings


def _stop_on_termination() -> None:
    """SIGTERM and SIGHUP (a closed terminal) stop everything as Ctrl-C does, instead of
    ending this process at once and leaving the cluster's processes behind."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, interrupt)


@click.command()
@click.option(
    "--demo",
    "scripted",
    is_flag=True,
    help="Kill the leader nimbus and a supervisor, show the recovery, print a summary, stop.",
)
@click.option(
    "--state-store",
    type=click.Choice(["zookeeper", "pacemaker"]),
    default="zookeeper",
    show_default=True,
    help="Where heartbeats go: ZooKeeper, or two pacemakers started with the cluster.",
)
@click.option(
    "--secure",
    is_flag=True,
    help="Require what a cluster on a network does: bearer tokens, TLS (a CA and "
    "certificates made in the cluster's directory) and ZooKeeper authentication with ACLs; "
    "prints how a client connects.",
)
@click.option(
    "--ha",
    "ha_mode",
    type=click.Choice(HA_MODES),
    default=HA_MODES[0],
    show_default=True,
    help="How the nimbuses elect their leader (nimbus.ha.mode): each under its own failover "
    "controller, themselves, or each under a zkfc beside it.",
)
@log_level_option
@with_config
def local(
    scripted: bool, state_store: str, secure: bool, ha_mode: str, conf: StratusConfig
) -> None:
    """Run a whole stratus cluster on this machine, with the examples on Spark.

    Its daemons get the settings of --config, -c and --log-level on top of the cluster's
    own, except its addresses, ports, directories, ZooKeeper and security, which it keeps."""
    console = Console()
    flags = [flag for flag, on in (("--demo", scripted), ("--secure", secure)) if on]
    if state_store != "zookeeper":
        flags.append(f"--state-store {state_store}")
    if ha_mode != HA_MODES[0]:
        flags.append(f"--ha {ha_mode}")
    console.rule(" ".join(["stratus local", *flags]))
    _stop_on_termination()
    fed = counted = 0
    interrupted = False
    with ExitStack() as stack:
        try:
            demo = Demo(
                stack,
                console,
                state_store=state_store,
                secure=secure,
                ha_mode=ha_mode,
                user=UserSettings.of(conf),
            )
            demo.submit_examples()
            print_cluster(console, demo.client.cluster())
            if scripted:
                fed, counted = run_scripted(demo)
                print_summary(console, demo, fed, counted)
            else:
                console.print("running; Ctrl-C stops everything")
                run_until_interrupted(demo)
        except KeyboardInterrupt:
            for signum in INTERRUPTS:  # from here on nothing may cut the stop short
                signal.signal(signum, signal.SIG_IGN)
            console.print("stopping")
            interrupted = True
    console.print("all processes stopped")
    if interrupted and scripted:
        raise click.Abort  # the demo did not finish: exit 1
    if fed != counted:
        raise DemoError(f"{fed} events fed but {counted} counted")
