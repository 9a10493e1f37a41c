"""The demo's pacemaker step: one pacemaker killed and restarted empty, and nothing moves.

With ``stratus local --demo --state-store pacemaker`` the cluster's heartbeats live in two
pacemakers. This step kills one with SIGKILL, starts it again on the same port (empty: a
pacemaker keeps everything in memory), times how long until it holds the round of every
supervisor again (it says it is warming up meanwhile, and for one TTL), and watches every
assignment for twice the supervisor timeout after the kill: none may change, since the
other pacemaker kept every heartbeat and the leader treats one missing from a warming
pacemaker as unknown, not dead::

    restart = restart_a_pacemaker(cluster, client, pipelines=["streaming-counts"])
    restart.moved        # {} : pipeline -> (old supervisor, new supervisor)
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass

from stratus.client import NimbusClient
from stratus.errors import StratusError
from stratus.local.cluster import SUPERVISOR_TIMEOUT_SECS, LocalCluster
from stratus.pacemaker.blocking import BlockingPacemakerPool
from stratus.pacemaker.client import parse_servers
from stratus.pacemaker.errors import PacemakerError
from stratus.pacemaker.settings import PacemakerClientSettings
from stratus.state.pacemaker_store import round_owner

POLL_SECS = 0.25
WATCH_SECS = 2 * SUPERVISOR_TIMEOUT_SECS  # past the timeout, with a leader round to spare
REFILL_TIMEOUT_SECS = 60.0
CALL_TIMEOUT_SECS = 5.0


class PacemakerRestartError(StratusError):
    """The restarted pacemaker did not get the heartbeats back in time."""


@dataclass(frozen=True)
class PacemakerRestart:
    """What the step saw: the pacemaker, how long the restart and the refill took (seconds
    after the kill), whether it said it was warming up, and what moved (pipeline -> the
    supervisors before and after)."""

    address: str
    restarted_secs: float
    refilled_secs: float
    supervisors: int
    warming: bool
    watched_secs: float
    moved: dict[str, tuple[str | None, str | None]]


def restart_a_pacemaker(
    cluster: LocalCluster,
    client: NimbusClient,
    pipelines: list[str],
    *,
    watch_secs: float = WATCH_SECS,
) -> PacemakerRestart:
    """Kill the first pacemaker, restart it empty, and watch the assignments of
    ``pipelines`` until it holds every supervisor's round again and ``watch_secs`` passed
    since the kill; see the module docstring."""
    if not cluster.pacemakers:
        raise PacemakerRestartError("the local cluster runs no pacemaker (--state-store)")
    victim = cluster.pacemakers[0]
    before = _placed(client, pipelines)
    supervisors = {s.id for s in client.cluster().supervisors}
    killed = time.monotonic()
    victim.signal(signal.SIGKILL)
    victim.wait(CALL_TIMEOUT_SECS)
    victim.start()
    victim.wait_ready()
    restarted = time.monotonic() - killed
    settings = PacemakerClientSettings(
        servers=parse_servers([victim.address], 0), timeout_secs=CALL_TIMEOUT_SECS
    )
    pool = BlockingPacemakerPool(settings, call_timeout_secs=CALL_TIMEOUT_SECS)
    moved: dict[str, tuple[str | None, str | None]] = {}
    refilled: float | None = None
    warming = False
    try:
        while True:
            now = time.monotonic() - killed
            if refilled is None:
                held, warming = _rounds_held(pool)
                if supervisors <= held:
                    refilled = now
                elif now > REFILL_TIMEOUT_SECS:
                    raise PacemakerRestartError(
                        f"the restarted pacemaker {victim.address} holds the heartbeats of "
                        f"{sorted(held)} only after {now:.0f} s, not of {sorted(supervisors)}"
                    )
            after = _placed(client, pipelines)
            moved.update(
                {
                    name: (before[name], after.get(name))
                    for name in before
                    if after.get(name) != before[name]
                }
            )
            if refilled is not None and now >= watch_secs:
                return PacemakerRestart(
                    victim.address, restarted, refilled, len(supervisors), warming, now, moved
                )
            time.sleep(POLL_SECS)
    finally:
        pool.close()


def _placed(client: NimbusClient, pipelines: list[str]) -> dict[str, str | None]:
    """The supervisor each pipeline is assigned to (None: unassigned)."""
    placed = {}
    for name in pipelines:
        assignment = client.workers(name).assignment
        placed[name] = assignment.supervisor if assignment is not None else None
    return placed


def _rounds_held(pool: BlockingPacemakerPool) -> tuple[set[str], bool]:
    """The supervisors whose round the pacemaker holds, and whether it says it is warming."""
    try:
        read = pool.get_all_pulses_for_path("/supervisors")
    except PacemakerError:
        return set(), False  # not reachable yet: the next poll asks again
    owners = {round_owner(path) for path in read.value}
    return {owner for owner in owners if owner is not None}, read.warming
