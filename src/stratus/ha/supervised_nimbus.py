"""A supervised nimbus (``nimbus.ha.mode: supervised``, the default): one command, two processes.

``stratus nimbus`` is then a failover controller (the zkfc of ``daemon.py``) that runs the
same ``stratus nimbus`` command line as its child, marked by ``CONTROLLER_ENV`` so that the
child serves as a nimbus in ``zkfc`` mode instead of starting a controller of its own::

    plan = controller_plan(SupervisedNimbusSettings.from_config(conf), sys.argv[1:], auth)
    Zkfc(plan.settings, session, client_auth(conf), security, service_auth=plan.service_auth)

    digest = os.environ.get(CONTROLLER_ENV)            # in the child: it is supervised
    NimbusSettings.from_config(conf, fixed=controller_credentials(digest))

The controller reaps its child, so a dead nimbus is failed over as soon as it exits, and it
checks its health as a zkfc does, so a frozen one is failed over after the health timeout.

Credentials come from the nimbus's own configuration: the parent makes a random token at
every start and hands only its sha256 to the child, whose access policy takes it as the
``admin`` principal ``nimbus-controller`` beside the token file's entries; the token itself
never leaves the parent. Calls to other hosts (fencing another nimbus, asking the other
controllers to cede) present the nimbus's client identity (``client.auth.*``,
``client.tls.*``).

The child serves the nimbus's address; a ``nimbus.port`` of 0 is picked here, once, so that
the controller knows whom it manages and a restarted child keeps its address.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from stratus.ha.errors import ZkfcConfigError
from stratus.ha.settings import SupervisedNimbusSettings, ZkfcSettings
from stratus.security.client_auth import ClientAuth
from stratus.security.roles import Role
from stratus.security.tokens import Credentials, Entry, digest_of, hash_token, new_token
from stratus.zk.ports import pick_free_port

CONTROLLER_ENV = "STRATUS_NIMBUS_CONTROLLER"  # in the child: sha256:<hex> of its controller
CONTROLLER_PRINCIPAL = "nimbus-controller"  # who the child's audit trail says transitioned it


@dataclass(frozen=True)
class ControllerPlan:
    """What the parent runs: the zkfc's settings (child command included) and how it
    presents itself to its child."""

    settings: ZkfcSettings
    service_auth: ClientAuth


def controller_plan(
    nimbus: SupervisedNimbusSettings,
    arguments: list[str],
    auth: ClientAuth,
    *,
    token: str | None = None,
    python: str = sys.executable,
) -> ControllerPlan:
    """The controller of the nimbus that ``stratus <arguments>`` configures; ``auth`` is the
    nimbus's client identity, whose TLS settings the controller keeps for its child."""
    token = token or new_token()
    port = nimbus.port or pick_free_port()
    command = (python, "-m", "stratus", *arguments)
    if not nimbus.port:
        command = (*command, "-c", f"nimbus.port={port}")  # the last -c wins
    host = nimbus.host
    target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    settings = nimbus.supervising(target, command, ((CONTROLLER_ENV, hash_token(token)),))
    return ControllerPlan(settings, ClientAuth(token=token, tls=auth.tls))


def controller_credentials(digest: str) -> Credentials:
    """The child's extra entry: its controller's token, known by ``digest``, as ``admin``."""
    try:
        known = digest_of(digest)
    except ValueError as exc:
        raise ZkfcConfigError(
            f"{CONTROLLER_ENV} must hold its controller's token as sha256:<hex>: {exc}; it is "
            "set by `stratus nimbus` for the nimbus it runs, never by hand"
        ) from None
    return Credentials(((known, Entry(Role.ADMIN, CONTROLLER_PRINCIPAL)),))
