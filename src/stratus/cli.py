"""The ``stratus`` command: every daemon and every client verb.

Each sub-command takes ``--config FILE`` (or ``STRATUS_CONF``) and any number of
``-c key=value`` overrides; errors are one line on stderr and a non-zero exit code.
"""

from __future__ import annotations

import click

from stratus import __version__
from stratus.client_commands import CLIENT_COMMANDS
from stratus.codedist.validate_command import validate
from stratus.command_options import StratusGroup
from stratus.coordination.elect_command import elect
from stratus.demo import local
from stratus.nimbus.command import nimbus
from stratus.supervisor.command import supervisor
from stratus.zk.server_command import zookeeper


@click.group(cls=StratusGroup)
@click.version_option(__version__, prog_name="stratus")
def main() -> None:
    """stratus: a highly available control plane for PySpark data pipelines."""


for _command in (zookeeper, elect, local, nimbus, supervisor, *CLIENT_COMMANDS):
    main.add_command(_command)
main.add_command(validate)
