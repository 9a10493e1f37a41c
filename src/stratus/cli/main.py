"""The ``stratus`` command: every daemon and every client verb.

``--config FILE`` (or ``STRATUS_CONF``) and any number of ``-c key=value`` overrides go before
the verb or after it; errors are one line on stderr (or JSON under ``--json``) and the exit
code of their class (``exit_codes.py``).
"""

from __future__ import annotations

import click

from stratus import __version__
from stratus.cli.client_commands import CLIENT_COMMANDS
from stratus.cli.elect_command import elect
from stratus.cli.haadmin_command import haadmin
from stratus.cli.local_command import local
from stratus.cli.nimbus_command import nimbus
from stratus.cli.options import StratusGroup, group_config_options
from stratus.cli.pacemaker_command import pacemaker
from stratus.cli.supervisor_command import supervisor
from stratus.cli.token_command import token
from stratus.cli.validate_command import validate
from stratus.cli.zkfc_command import zkfc
from stratus.cli.zookeeper_command import zookeeper, zookeeper_java


@click.group(cls=StratusGroup)
@click.version_option(__version__, prog_name="stratus")
@group_config_options
def main() -> None:
    """stratus: a highly available control plane for PySpark data pipelines."""


for _command in (zookeeper, elect, local, nimbus, supervisor, pacemaker, *CLIENT_COMMANDS):
    main.add_command(_command)
main.add_command(validate)
main.add_command(zkfc)
main.add_command(haadmin)
main.add_command(token)
main.add_command(zookeeper_java)
