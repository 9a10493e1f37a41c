"""The rules between keys of the configuration, checked once, at load.

Each rule reads keys of more than one section (``supervisor.fence.timeout.secs`` +
``supervisor.worker.stop.secs`` < ``nimbus.supervisor.timeout.secs``) and raises
``ValueError`` with a message that names the keys and what to change; ``StratusConfig``
runs ``check_keys_agree`` after every key passed its own checks, and the loader turns the
error into a ``ConfigError``::

    check_keys_agree(conf)  # ValueError: supervisor.fence.timeout.secs + ... must be less ...

The rules run in the order of ``RULES``; the first that fails is the one reported.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stratus.config.model import StratusConfig

UNSPECIFIED_HOSTS = frozenset({"0.0.0.0", "::", "[::]", ""})  # bind-only, never advertised


def check_keys_agree(conf: StratusConfig) -> None:
    """Every rule between keys, in order: ``ValueError`` from the first that fails."""
    for rule in RULES:
        rule(conf)


def worker_users_fit_the_mode(conf: StratusConfig) -> None:
    mode, users = conf.supervisor_worker_run_as, conf.supervisor_worker_users
    if len(set(users)) != len(users):
        raise ValueError("supervisor.worker.users names a user twice")
    if "root" in users:
        raise ValueError("supervisor.worker.users may not name root: workers run a user's code")
    if mode == "supervisor" and users:
        raise ValueError(
            "supervisor.worker.users is set but supervisor.worker.run.as is `supervisor`: "
            "set supervisor.worker.run.as to `pool` (one user per pipeline) or `shared`"
        )
    if mode == "pool" and len(users) < conf.supervisor_slots:
        raise ValueError(
            f"supervisor.worker.run.as is `pool` but supervisor.worker.users names "
            f"{len(users)} users for supervisor.slots {conf.supervisor_slots}: two "
            "pipelines never share a user, so list at least one user per slot"
        )
    if mode == "shared" and len(users) != 1:
        raise ValueError(
            "supervisor.worker.run.as is `shared`: supervisor.worker.users must name "
            f"exactly one user (it names {len(users)})"
        )
    warm_asked = "supervisor_worker_warm" in conf.model_fields_set
    if mode != "supervisor" and conf.supervisor_worker_warm and warm_asked:
        raise ValueError(
            "supervisor.worker.warm works only with supervisor.worker.run.as `supervisor`: "
            "a warm worker starts before it knows its pipeline, hence its user"
        )


def grace_fits_in_session(conf: StratusConfig) -> None:
    grace = conf.elect_stop_grace_secs
    if grace is not None and grace >= conf.zookeeper_session_timeout_secs / 4:
        raise ValueError(
            "elect.stop.grace.secs must be less than a quarter of "
            "zookeeper.session.timeout.secs, so that a command is dead before its "
            "leadership can pass to another process"
        )


def a_fetch_fits_in_its_address_bound(conf: StratusConfig) -> None:
    if conf.nimbus_code_download_parts > conf.nimbus_code_max_connections_per_address:
        raise ValueError(
            f"nimbus.code.download.parts ({conf.nimbus_code_download_parts}) must be at "
            "most nimbus.code.max.connections.per.address "
            f"({conf.nimbus_code_max_connections_per_address}): a nimbus fetches that many "
            "byte ranges at once from one package server, which refuses connections of "
            "one address past its bound"
        )


def advertised_hosts_are_reachable(conf: StratusConfig) -> None:
    _refuse_unspecified("nimbus.host", conf.nimbus_host, "nimbus.bind.host", "peers and clients")
    if conf.supervisor_host:  # unset (or empty): the host name
        _refuse_unspecified(
            "supervisor.host", conf.supervisor_host, "supervisor.http.bind.host", "the nimbuses"
        )


def shared_code_has_a_url(conf: StratusConfig) -> None:
    if conf.nimbus_code_distributor == "shared" and not conf.nimbus_code_shared_url:
        raise ValueError(
            "nimbus.code.distributor is `shared` but nimbus.code.shared.url is not set"
        )


def supervisors_fence_before_reassignment(conf: StratusConfig) -> None:
    stop_by = conf.supervisor_fence_timeout_secs + conf.supervisor_worker_stop_secs
    if stop_by >= conf.nimbus_supervisor_timeout_secs:
        raise ValueError(
            "supervisor.fence.timeout.secs + supervisor.worker.stop.secs "
            f"({stop_by:g}) must be less than nimbus.supervisor.timeout.secs "
            f"({conf.nimbus_supervisor_timeout_secs:g}): a supervisor cut off from "
            "ZooKeeper must have stopped its workers before the leader moves them"
        )
    if conf.supervisor_worker_timeout_secs >= conf.nimbus_task_timeout_secs:
        raise ValueError(
            "supervisor.worker.timeout.secs must be less than nimbus.task.timeout.secs: "
            "a supervisor kills a silent worker before the leader moves its pipeline"
        )


def beats_fit_their_lease(conf: StratusConfig) -> None:
    interval = conf.supervisor_beat_interval_ms / 1000
    lease = conf.supervisor_beat_lease_secs
    if 3 * interval >= lease:
        raise ValueError(
            f"3 x supervisor.beat.interval.ms ({3 * interval:g} s) must be less than "
            f"supervisor.beat.lease.secs ({lease:g}): one or two beats lost, or a "
            "pacemaker slow to answer, must not end the beat lease; lower the interval or "
            "lengthen the lease"
        )
    stop_by = lease + conf.supervisor_beat_stop_secs
    if stop_by >= conf.nimbus_supervisor_timeout_secs:
        raise ValueError(
            "supervisor.beat.lease.secs + supervisor.beat.stop.secs "
            f"({stop_by:g}) must be less than nimbus.supervisor.timeout.secs "
            f"({conf.nimbus_supervisor_timeout_secs:g}): a supervisor whose beats stopped "
            "must have killed its hot workers before the leader moves their pipelines"
        )


def leader_fences_before_the_timeout(conf: StratusConfig) -> None:
    after = conf.nimbus_supervisor_fence_after_secs
    if not after:  # unset (the default fits) or 0 (never)
        return
    timeout = conf.nimbus_supervisor_timeout_secs
    if after >= timeout:
        raise ValueError(
            f"nimbus.supervisor.fence.after.secs ({after:g}) must be less than "
            f"nimbus.supervisor.timeout.secs ({timeout:g}): the leader fences a silent "
            "supervisor to move its pipelines before the timeout; lower it, or leave it "
            "unset (half of the timeout), or 0 to never fence"
        )
    seen_every = conf.nimbus_monitor_freq_secs + conf.worker_heartbeat_frequency_secs
    if after <= seen_every:
        raise ValueError(
            f"nimbus.supervisor.fence.after.secs ({after:g}) must be more than "
            "nimbus.monitor.freq.secs + worker.heartbeat.frequency.secs "
            f"({seen_every:g}): a supervisor that heartbeats on time can look silent "
            "that long between two rounds of the leader, and would be fenced; raise it, "
            "lower nimbus.monitor.freq.secs, or set 0 to never fence"
        )


def pacemaker_store_fits_the_timeouts(conf: StratusConfig) -> None:
    if conf.cluster_state_store != "pacemaker":
        return
    check_pulse_ttl(conf)
    bound = min(conf.zookeeper_session_timeout_secs, conf.supervisor_fence_timeout_secs)
    if conf.pacemaker_client_timeout_secs >= bound:
        raise ValueError(
            f"pacemaker.client.timeout.secs ({conf.pacemaker_client_timeout_secs:g}) "
            "must be less than supervisor.fence.timeout.secs and "
            f"zookeeper.session.timeout.secs (the shorter is {bound:g}): a pacemaker "
            "that hangs must be given up while the others still take a supervisor's "
            "heartbeats, before the supervisor fences itself"
        )


def check_pulse_ttl(conf: StratusConfig) -> None:
    """``pacemaker.pulse.ttl.secs`` above both leader timeouts, else ``ValueError``.

    A pulse evicted before the leader's timeout would read as a heartbeat gone, and the
    warm-up of a restarted pacemaker (one TTL) would end before a dead supervisor is
    judged. Checked at load when ``cluster.state.store`` is ``pacemaker``: every nimbus
    and supervisor refuses to start otherwise.
    """
    ttl = conf.pacemaker_pulse_ttl_secs
    for key, timeout in (
        ("nimbus.supervisor.timeout.secs", conf.nimbus_supervisor_timeout_secs),
        ("nimbus.task.timeout.secs", conf.nimbus_task_timeout_secs),
    ):
        if ttl <= timeout:
            raise ValueError(
                f"pacemaker.pulse.ttl.secs ({ttl:g}) must exceed {key} ({timeout:g}): "
                "a pulse must outlive the time after which the leader judges its writer "
                f"dead; raise pacemaker.pulse.ttl.secs above {timeout:g}"
            )


def checkpoint_root_scheme_allowed(conf: StratusConfig) -> None:
    root = conf.checkpoint_root()
    scheme = url_scheme(root)
    if scheme not in conf.pipeline_checkpoint_schemes:
        raise ValueError(
            f"pipeline.checkpoint.root {root!r} uses the scheme "
            f"{scheme!r}, which pipeline.checkpoint.schemes "
            f"({', '.join(conf.pipeline_checkpoint_schemes)}) does not allow"
        )


RULES: tuple[Callable[[StratusConfig], None], ...] = (
    worker_users_fit_the_mode,
    grace_fits_in_session,
    a_fetch_fits_in_its_address_bound,
    advertised_hosts_are_reachable,
    shared_code_has_a_url,
    supervisors_fence_before_reassignment,
    beats_fit_their_lease,
    leader_fences_before_the_timeout,
    pacemaker_store_fits_the_timeouts,
    checkpoint_root_scheme_allowed,
)


def url_scheme(location: str) -> str:
    """The scheme of a URL, lower case; ``file`` for a plain path."""
    scheme, sep, _ = location.partition("://")
    return scheme.lower() if sep and scheme.isascii() and scheme.isalnum() else "file"


def _refuse_unspecified(key: str, host: str, bind_key: str, reached_by: str) -> None:
    """Refuse an unspecified address (0.0.0.0, ::) as the advertised ``key``: it is only
    ever a bind address (``bind_key``), and nobody can reach it."""
    if host in UNSPECIFIED_HOSTS:
        raise ValueError(
            f"{key} is {host}, which {reached_by} cannot reach: set {key} to the address "
            f"they use and {bind_key} to {host} to listen on every interface"
        )
