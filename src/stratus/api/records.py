"""The records of the nimbus API: what ZooKeeper holds and what HTTP carries, as pydantic models.

The server writes them and the client (``stratus.client``) reads them, so both sides share
this one definition. A pipeline is PENDING while its code reaches
``pipeline.min.replication.count`` nimbuses, then moves ACTIVE ⇄ INACTIVE → KILLED; a KILLED
record is removed by the leader once its ``kill_at`` time has passed. A pipeline whose code is
on no live nimbus for ``nimbus.code.lost.fail.secs``, or whose worker cannot start, becomes
FAILED, with the reason; a batch pipeline whose function returned becomes FINISHED.

The leader runs each ACTIVE pipeline through an ``Assignment`` (``<root>/assignments/<name>``)
naming one supervisor; that supervisor's worker reports a ``WorkerHeartbeat`` and the
supervisor its own ``SupervisorHeartbeat`` through the cluster state store.

Records evolve across releases by addition (docs/upgrades.md): a field an older writer did
not write takes its default, a field this release does not know is ignored on a read and,
in the records the leader reads and writes back (``RewrittenRecord``: ``PipelineRecord``
with its ``PendingUpdate``, ``LeaderTerm``, ``SupervisorCordon``, the purge orders of
``stratus.api.purges``), kept on the rewrite, so a leader of the previous release never
drops what a newer one wrote::

    record = PipelineRecord.model_validate_json(raw)   # a newer writer's fields kept aside
    record.model_copy(update={"status": ...}).encode()  # ... and written back with it
"""

from __future__ import annotations

from collections import Counter
from enum import StrEnum
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    computed_field,
    field_validator,
)

from stratus.api.names import PipelineName
from stratus.api.record_base import RewrittenRecord, StoredRecord
from stratus.api.standby_workers import BeatLease, StandbyWorkerBeat, StandbyWorkerView
from stratus.cluster_names import cluster_root


class PipelineStatus(StrEnum):
    PENDING = "PENDING"  # waiting for its code to reach the minimum replication
    ACTIVE = "ACTIVE"
    INACTIVE = "INACTIVE"
    KILLED = "KILLED"
    FAILED = "FAILED"  # its code was lost, or its worker could not run it
    FINISHED = "FINISHED"  # a batch pipeline whose function returned

    @property
    def needs_code(self) -> bool:
        """Whether nimbuses fetch and keep this pipeline's code."""
        return self not in (PipelineStatus.KILLED, PipelineStatus.FAILED, PipelineStatus.FINISHED)

    @property
    def runs(self) -> bool:
        """Whether the leader keeps this pipeline assigned to a supervisor."""
        return self is PipelineStatus.ACTIVE

    @property
    def needed_to_lead(self) -> bool:
        """Whether a nimbus must hold this pipeline's code to lead: the active ones do.

        A PENDING pipeline's code may still be on the old leader alone; requiring it would
        leave the cluster without a leader whenever a leader dies mid-submit.
        """
        return self in (PipelineStatus.ACTIVE, PipelineStatus.INACTIVE)


class PendingUpdate(RewrittenRecord):
    """New code for a running pipeline, waiting for ``replication_required`` copies."""

    digest: str = Field(description="sha256 of the new package, hex")
    size_bytes: int
    blake3: str | None = None
    conf: dict[str, Any] = Field(
        default_factory=dict, description="the conf the pipeline runs with once updated"
    )
    user_keys: list[str] | None = Field(
        default=None, description="the pipeline's user_keys once updated (null: every key)"
    )
    request_id: str = Field(default="", description="the client request id of the update")
    requested: float = Field(description="wall-clock time of the update request")
    replication: int = Field(default=0, description="nimbuses holding the new code")
    replication_required: int = 1
    replication_deadline: float | None = Field(
        default=None,
        description="when the update is applied even short of the required replication "
        "(wall clock); null waits forever",
    )


class AssignmentReason(StrEnum):
    """Why the leader changed a pipeline's assignment (``assignment-history/``)."""

    PLACED = "placed"  # it had none: its first placement, after an activate, or room found
    SUPERVISOR_DEAD = "supervisor_dead"  # moved off a supervisor judged dead or gone
    WORKER_SILENT = "worker_silent"  # moved off a live supervisor: its worker fell silent
    FENCED = "fenced"  # assigned anew (its own supervisor too): a leader's pipeline fence
    # stopped its worker, and its standby worker was not promoted
    # a new generation, rewritten in place; or a hot pipeline's assignment deleted (to no
    # supervisor) for its standby worker to take over once the old worker stopped
    REBALANCED = "rebalanced"  # its conf changed
    UPDATED = "updated"  # new code
    ROLLED_BACK = "rolled_back"  # a kept version's code again
    RESTARTED = "restarted"  # stratus restart (or placed again)
    NO_ROOM = "no_room"  # its supervisor died and no other had a free slot: unassigned
    DRAINED = "drained"  # moved off a drained supervisor: first unassigned (its worker
    # stops there), then placed elsewhere once that worker has stopped
    DEACTIVATED = "deactivated"  # unassigned: the pipeline is INACTIVE
    KILLED = "killed"  # unassigned: the pipeline is KILLED
    FINISHED = "finished"  # unassigned: its batch function returned
    FAILED = "failed"  # unassigned: the pipeline FAILED
    STANDBY_PROMOTED = "standby_promoted"  # moved to its standby worker's supervisor, which
    # runs on at once (stratus.api.standby_workers)

    @property
    def new_generation(self) -> bool:
        """Whether the change is the pipeline's new generation (an update, a rollback, a
        restart or a rebalance): its assignment rewritten in place, or deleted (to no
        supervisor) so that its old worker stops before its standby worker takes over."""
        return self in _NEW_GENERATION_REASONS


_NEW_GENERATION_REASONS = frozenset(
    {
        AssignmentReason.UPDATED,
        AssignmentReason.ROLLED_BACK,
        AssignmentReason.RESTARTED,
        AssignmentReason.REBALANCED,
    }
)


class KeptVersion(RewrittenRecord):
    """One version of a pipeline's code the leader keeps, to roll back to: its package (kept
    in every nimbus's store while the version is kept) and the conf it ran with."""

    version: int = Field(description="its version number; never given to other code")
    digest: str = Field(description="sha256 of its package, hex")
    size_bytes: int
    blake3: str | None = None
    conf: dict[str, Any] = Field(default_factory=dict, description="the conf it ran with")
    user_keys: list[str] | None = None
    applied: float = Field(description="wall-clock time it became the pipeline's code")


class PipelineRecord(RewrittenRecord, StoredRecord):
    """One pipeline, as ``<root>/pipelines/<name>`` holds it."""

    name: str
    status: PipelineStatus
    digest: str = Field(description="sha256 of the package, hex")
    size_bytes: int
    blake3: str | None = Field(
        default=None,
        description="BLAKE3 of the package, hex, computed at submit: copies are checked "
        "against it (null in older records: against the sha256)",
    )
    conf: dict[str, Any] = Field(
        default_factory=dict,
        description="the pipeline's conf; in the API's answers the value of a secret-looking "
        "key (naming a password, secret, token, credential or key) is '***', and a secret in "
        "another value (a URL's password, a secret query parameter) is replaced by '***'",
    )
    user_keys: list[str] | None = Field(
        default=None,
        description="the keys of conf the user set (at submit, by rebalances and updates), "
        "which an update keeps over the new package's manifest; the others came from the "
        "manifest and follow it (null in older records: every key counts as set)",
    )
    submitted: float = Field(description="wall-clock time of the submit, seconds since the epoch")
    updated: float = Field(description="wall-clock time of the last change")
    epoch: int = Field(description="leadership epoch of the nimbus that last wrote the record")
    request_id: str = Field(default="", description="the client request id of the submit")
    kill_at: float | None = Field(
        default=None, description="when a KILLED record is removed (wall clock)"
    )
    rebalances: int = Field(default=0, description="how many times the pipeline was rebalanced")
    replication: int = Field(
        default=1, description="nimbuses holding the code (while PENDING, and at activation)"
    )
    replication_required: int = Field(
        default=1, description="pipeline.min.replication.count for this pipeline"
    )
    replication_deadline: float | None = Field(
        default=None,
        description="while PENDING: when the pipeline is activated even short of the "
        "required replication (wall clock); null waits forever",
    )
    reason: str | None = Field(
        default=None,
        description="why the pipeline FAILED, or a note on its activation short of the "
        "required replication",
    )
    version: int = Field(
        default=1, description="the code version: 1 at submit, one more at every update applied"
    )
    update: PendingUpdate | None = Field(
        default=None,
        description="an update whose code is on its way to the minimum replication; the "
        "pipeline runs its current code until the leader applies it",
    )
    requests: list[str] = Field(
        default_factory=list,
        description="the request ids of the last updates and rebalances applied, newest last: "
        "a retry with one of them changes nothing",
    )
    purge: bool = Field(
        default=False,
        description="a KILLED pipeline's checkpoints are deleted with its record (kill --purge)",
    )
    owner: str | None = Field(
        default=None,
        description="the principal that submitted the pipeline, which owns it with the "
        "principals of its conf's pipeline.owners (null: submitted without a token file, or "
        "before owners were recorded: only admins may change it)",
    )
    versions: list[KeptVersion] = Field(
        default_factory=list,
        description="the versions kept to roll back to, oldest first, the current one last "
        "(pipeline.versions.keep of them; empty in records older than this list)",
    )
    on_trial: bool = Field(
        default=False,
        description="its version was applied by an update and has not yet proven itself (no "
        "committed batch, no finished run): a failure rolls it back",
    )
    generation_cause: str | None = Field(
        default=None,
        description="what made its generation last change, as the assignment history names "
        "it: updated, rolled_back, restarted or rebalanced (null in older records)",
    )
    generation_offset: int = Field(
        default=0,
        ge=0,
        description="generations added by rollbacks and restarts, so that the generation "
        "grows at every change even when the version goes back (a held update withdrawn "
        "takes back the generation of the worker that runs)",
    )

    @property
    def generation(self) -> int:
        """What its assignments carry: one more at every rebalance, update applied, rollback
        and restart, so each restarts the worker (the same count as ``rebalances`` before any
        update). A held update withdrawn (``update_withdrawal``) goes back to the generation
        of the worker that runs, which is not restarted; a number may so come again later
        with other code, so a generation is always compared with its digest."""
        return self.rebalances + self.version - 1 + self.generation_offset

    def kept(self, version: int) -> KeptVersion | None:
        """The kept version numbered ``version``, if it is kept."""
        return next((kept for kept in self.versions if kept.version == version), None)

    @property
    def newest_version(self) -> int:
        """The highest version number it ever had: the next update is one more."""
        return max([self.version, *(kept.version for kept in self.versions)])


class NimbusRegistration(StoredRecord):
    """What a nimbus writes into its ephemeral ``<root>/nimbuses/<host:port>``."""

    host: str
    port: int
    started: float = Field(description="wall-clock start time, seconds since the epoch")
    version: str
    insecure: bool = Field(
        default=False, description="it serves an unauthenticated API on a network address"
    )

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


class NimbusSummary(BaseModel):
    """One nimbus of the cluster."""

    host: str
    port: int
    uptime_secs: int
    is_leader: bool
    version: str
    insecure: bool = Field(
        default=False,
        description="it serves an unauthenticated API on a network address (nimbus.auth.insecure)",
    )


class WarmHeld(StrEnum):
    """Why a supervisor keeps fewer warm workers than it has free slots, or none."""

    OFF = "off"  # supervisor.worker.warm false, or supervisor.worker.warm.memory.mb 0
    RUN_AS = "run_as"  # left unset, with workers run as other users: off
    MASTER = "master"  # left unset, with a pipeline.spark.master that is no local[...]: off
    BUDGET = "budget"  # another one would pass supervisor.worker.warm.memory.mb
    MEMORY_SHORT = "memory_short"  # the machine's available memory is short


MIB = 1024 * 1024  # the unit of WarmMemory's *_mb fields


class WarmMemory(StoredRecord):
    """A supervisor's warm workers and the memory they may use, as its registration shows
    them (``docs/supervisor.md``, "Warm workers")."""

    machine_mb: int | None = Field(
        description="the machine's memory, or the supervisor's cgroup limit where lower, "
        "MiB; null: unknown (no /proc/meminfo)"
    )
    budget_mb: int = Field(
        description="what its warm workers may use together "
        "(supervisor.worker.warm.memory.mb, or derived), MiB"
    )
    used_mb: int = Field(
        default=0,
        description="what its warm workers use: each one up at its measured resident memory "
        "(its process tree, JVM included), one still starting at an estimate, MiB",
    )
    up: int = Field(default=0, description="warm workers alive, ready or starting")
    ready: int = Field(default=0, description="warm workers whose Spark is up")
    held: WarmHeld | None = Field(
        default=None,
        description="why it keeps fewer warm workers than free slots, or none; null: "
        "nothing holds them back",
    )
    why: str | None = Field(default=None, description="the reason of `held`, in words")
    standby_workers: int = Field(
        default=0, ge=0, description="standby workers it runs, which share the warm budget"
    )
    standby_mb: int = Field(
        default=0, ge=0, description="what its standby workers use, within used_mb, MiB"
    )


class SupervisorSummary(StoredRecord):
    """One supervisor, as its ephemeral ``<root>/supervisors/<id>`` holds it."""

    id: str
    host: str = ""
    slots: int = 0
    used: int = 0
    started: float = Field(default=0.0, description="wall-clock start time")
    endpoint: str | None = Field(
        default=None,
        description="host:port of its endpoint (worker logs, health, metrics); null: none",
    )
    endpoint_tls: bool = Field(default=False, description="its endpoint serves https")
    warm: WarmMemory | None = Field(
        default=None,
        description="its warm workers and their memory; null: not reported yet (or a "
        "supervisor of an older release)",
    )
    zookeeper_outage: Literal["ride", "fence"] | None = Field(
        default=None,
        description="what it does through an outage of ZooKeeper now: ride (keeps its workers "
        "while it proves that no quorum serves) or fence (stops them at its lease's end); "
        "null: a supervisor that does not say",
    )
    ride_unavailable: str | None = Field(
        default=None,
        description="why it fences although supervisor.zookeeper.outage is ride (its "
        "zookeeper.servers does not name every voting member of the ensemble once); null: "
        "it rides, or was told to fence",
    )
    beat_lease: BeatLease | None = Field(
        default=None,
        description="the fast beats' lease its hot workers run under; null: it sends no fast "
        "beats (the ZooKeeper state store, or an older release) and hosts no standby worker",
    )


class SupervisorCordon(RewrittenRecord, StoredRecord):
    """A supervisor that takes no new pipeline: ``<root>/cordons/<id>``.

    The cluster's state, not the supervisor process's: written by the leader in its fenced
    transactions, it outlives restarts of the supervisor and of every nimbus. With ``drain``
    the leader also moves the supervisor's pipelines to others with room
    (``docs/scheduling.md``, "Cordon and drain").
    """

    supervisor: str
    at: float = Field(description="wall-clock time of the cordon, epoch seconds")
    epoch: int = Field(description="the term of the leader that wrote it")
    by: str | None = Field(default=None, description="who asked (the token's principal)")
    drain: bool = Field(default=False, description="its pipelines are being moved away")
    drain_at: float | None = Field(
        default=None, description="wall-clock time the drain was asked; null: no drain"
    )


class CordonStatus(BaseModel):
    """A supervisor's cordon, and how far its drain is as the leader's last round saw it."""

    supervisor: str
    cordoned: bool
    draining: bool
    remaining: list[str] = Field(description="pipelines still assigned to it")
    moving: list[str] = Field(
        description="pipelines taken off it: waiting for their worker there to stop, or for "
        "a supervisor with room"
    )
    no_room: list[str] = Field(
        description="pipelines of it that found no other supervisor with a free slot in the "
        "leader's last round"
    )

    @computed_field  # type: ignore[prop-decorator]
    @property
    def done(self) -> bool:
        """Nothing of it is left there or on the way."""
        return not self.remaining and not self.moving


class ClusterIdentity(BaseModel):
    """Which cluster a daemon serves, or wrote a file for: its ZooKeeper root (the chroot of
    ``zookeeper.servers`` joined with ``zookeeper.root``) and its servers. Two identities
    are one cluster when their roots are equal and they share at least one server, so that
    a configuration change that adds or removes a ZooKeeper server keeps the cluster (a
    server written another way, ``localhost`` for ``127.0.0.1``, counts as another)."""

    model_config = ConfigDict(frozen=True)

    root: str
    servers: tuple[str, ...]

    @classmethod
    def of(cls, hosts: str, root: str) -> ClusterIdentity:
        """From ``zookeeper.servers`` (a kazoo connect string, maybe with a chroot) and
        ``zookeeper.root``."""
        servers = hosts.partition("/")[0]
        names = sorted({server.strip() for server in servers.split(",") if server.strip()})
        return cls(root=cluster_root(hosts, root), servers=tuple(names))

    def same(self, other: ClusterIdentity) -> bool:
        return self.root == other.root and bool(set(self.servers) & set(other.servers))

    def __str__(self) -> str:
        return f"ZooKeeper {','.join(self.servers)} root {self.root}"


class FencingToken(BaseModel):
    """What a worker claims its pipeline's checkpoint with: the higher token owns it.

    Read by the supervisor from the assignment znode's stat, never written in it: ``zxid`` is
    the znode's modification zxid (``mzxid``), which ZooKeeper makes grow with every write of
    the ensemble, so every new assignment of a pipeline, by any leader, in any term, gets a
    higher one; ``era`` is the creation time (ms) of the ``assignments`` znode, which orders
    clusters that used one checkpoint root in turn (a new ZooKeeper starts its zxids again).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    era: int = Field(ge=0, description="ctime (ms) of the assignments znode: the cluster")
    zxid: int = Field(ge=0, description="mzxid of the assignment znode")

    def key(self) -> tuple[int, int]:
        """The order of tokens: by era, then by zxid."""
        return (self.era, self.zxid)

    def __str__(self) -> str:
        return f"{self.era}-{self.zxid}"


class Assignment(StoredRecord):
    """Where the leader runs one ACTIVE pipeline: ``<root>/assignments/<name>``.

    Written only in the leader's fenced transactions. ``epoch`` is the term that wrote it: a
    supervisor ignores an assignment of a pipeline from an older epoch than one it has seen.
    A change of ``generation`` (a rebalance, an update) or ``digest`` restarts the worker with
    the new code and conf; deleting the assignment stops the worker (deactivate, kill, a
    move elsewhere). ``token`` is the supervisor's, from the znode's stat (never stored).
    """

    pipeline: str
    supervisor: str
    epoch: int
    generation: int = Field(description="the pipeline record's generation: rebalances and updates")
    digest: str
    size_bytes: int
    blake3: str | None = Field(default=None, description="the pipeline record's BLAKE3")
    conf: dict[str, Any] = Field(default_factory=dict)
    assigned: float = Field(description="wall-clock time of the assignment")
    token: FencingToken | None = Field(
        default=None,
        exclude=True,
        description="the worker's fencing token, from the znode's stat as a supervisor read "
        "it; None where an assignment was read without it (the leader's own reads)",
    )


class AssignmentChange(StoredRecord):
    """One change of a pipeline's assignment, written by the leader in the same fenced
    transaction as the assignment itself (``assignment-history/<name>/c-<seq>``)."""

    at: float = Field(description="wall-clock time of the change, epoch seconds")
    epoch: int = Field(description="the term of the leader that made it")
    reason: AssignmentReason
    supervisor: str | None = Field(description="where it runs from now on; null: nowhere")
    previous: str | None = Field(
        default=None, description="where it ran before; null: it had no assignment"
    )
    generation: int = Field(description="the pipeline record's generation at the change")
    digest: str = Field(description="sha256 of the pipeline's code at the change")


class AssignmentHistory(BaseModel):
    """A pipeline's newest assignment changes, newest first (the newest 50 are kept)."""

    pipeline: str
    changes: list[AssignmentChange]


class WorkerState(StrEnum):
    STARTING = "STARTING"  # the process runs; Spark starts
    RUNNING = "RUNNING"  # the pipeline runs (queries started, a batch in progress, an sdp run)
    RESTARTING = "RESTARTING"  # it crashed; the supervisor starts it again after a backoff
    FINISHED = "FINISHED"  # a batch function returned and no query was left running
    FAILED = "FAILED"  # it crashed at start too often: the supervisor gave up (see error)
    STOPPED = "STOPPED"  # stopped on order; checkpoints kept
    FENCED = "FENCED"  # a worker of a newer assignment claimed the checkpoint: not restarted

    @property
    def final(self) -> bool:
        return self in _FINAL_WORKER_STATES


_FINAL_WORKER_STATES = frozenset(
    {WorkerState.FINISHED, WorkerState.FAILED, WorkerState.STOPPED, WorkerState.FENCED}
)


def _unknown(value: object) -> bool:
    return value is None


class QueryProgress(BaseModel):
    """The last progress of one Structured Streaming query of a worker."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    name: str | None = None
    id: str = ""
    batch_id: int = -1
    num_input_rows: int = 0
    input_rows_per_second: float = 0.0
    processed_rows_per_second: float = 0.0
    rows_total: int = Field(default=0, description="input rows of every batch since start")
    # written only when known: a heartbeat stays as small, and as an older worker wrote it
    batch_duration_secs: float | None = Field(
        default=None,
        exclude_if=_unknown,
        description="how long the last batch took (Spark's triggerExecution); absent: unknown",
    )
    trigger_interval_secs: float | None = Field(
        default=None,
        exclude_if=_unknown,
        description="the trigger interval the pipeline declares; absent: none",
    )
    watermark_lag_secs: float | None = Field(
        default=None,
        exclude_if=_unknown,
        description="the last batch's start minus its event-time watermark; absent: no watermark",
    )


class WorkerCrash(BaseModel):
    """A worker's last crash on its supervisor: kept in its heartbeats across the restart
    that follows, so the status still shows what happened once it runs again."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    time: float = Field(description="wall-clock time the supervisor saw the crash")
    exit_code: int | None = Field(
        default=None, description="its exit code; null if a signal ended it or it never started"
    )
    signal: str | None = Field(default=None, description="the signal that ended it (SIGKILL, ...)")
    error: str = Field(description="its error, or its log's tail: bounded, secrets redacted")
    last_batch_id: int = Field(
        default=-1,
        ge=-1,
        description="the highest batch id its queries had reported by its last heartbeat; "
        "-1: none (it crashed at its start, or on its first batch)",
    )

    @property
    def exit(self) -> str:
        """How it ended, as people read it: ``exit code 3``, ``SIGKILL``, ``not started``."""
        if self.signal is not None:
            return self.signal
        return f"exit code {self.exit_code}" if self.exit_code is not None else "not started"


class RefusedUpdate(BaseModel):
    """New code a supervisor would not switch to: its entry point failed to import in the
    new environment (the preflight), so the old worker runs on."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    generation: int = Field(description="the generation of the refused assignment")
    digest: str = Field(description="sha256 of the refused package")
    error: str = Field(description="the import's error, its exception line first")


class WorkerHeartbeat(StoredRecord):
    """What a worker reports, through its supervisor, at ``/workers/<pipeline>/<supervisor>``."""

    pipeline: str
    supervisor: str
    epoch: int = Field(description="epoch of the assignment the worker runs")
    generation: int
    digest: str = ""
    state: WorkerState
    time: float = Field(description="wall-clock time of the heartbeat")
    started: float = Field(default=0.0, description="wall-clock start of this worker process")
    pid: int | None = None
    app_id: str | None = Field(default=None, description="the Spark application id")
    spark_ui: str | None = Field(
        default=None,
        description="the address of its SparkContext's web UI (uiWebUrl) while it runs; null "
        "when the UI is off (spark.ui.enabled, off by default)",
    )
    queries: list[QueryProgress] = Field(default_factory=list)
    runs: int = Field(default=0, description="sdp: updates completed so far")
    restarts: int = Field(default=0, description="crashes restarted since the assignment")
    error: str | None = Field(default=None, description="the last error, if any")
    last_crash: WorkerCrash | None = Field(
        default=None,
        description="the last crash since the assignment, kept after the restart that follows",
    )
    refused: RefusedUpdate | None = Field(
        default=None,
        description="an update this supervisor refused to switch to: its preflight failed",
    )

    @property
    def rows_total(self) -> int:
        return sum(query.rows_total for query in self.queries)

    @property
    def batches_total(self) -> int:
        """The batches its queries committed since it started (each query's from 0)."""
        return sum(query.batch_id + 1 for query in self.queries if query.batch_id >= 0)

    @property
    def last_batch_id(self) -> int:
        """The highest batch id its queries committed; -1 before the first."""
        return max((query.batch_id for query in self.queries), default=-1)


class RunOutcome(StrEnum):
    """How one run of a pipeline (one worker process's life on one supervisor) ended."""

    FINISHED = "FINISHED"  # its batch function returned
    FAILED = "FAILED"  # it crashed, or was killed as hung (a restart is a new run)
    STOPPED = "STOPPED"  # stopped on order: deactivated, killed, its supervisor stopping
    FENCED = "FENCED"  # its supervisor was fenced, or a newer worker claimed the checkpoint
    MOVED = "MOVED"  # its assignment went to another supervisor
    UPDATED = "UPDATED"  # its assignment changed generation or code: a new run follows


class RunRecord(RewrittenRecord, StoredRecord):
    """One run of a pipeline: ``runs/<pipeline>/run-<seq>``, the sequence its number.

    Written by the supervisor that runs it: created just before the worker starts, completed
    (``ended``, ``outcome``, ...) when it ends. A run left open by a supervisor that died is
    shown with the end its reader infers from the assignment history (``inferred``)."""

    run: int = Field(default=0, description="the run's number: its node's sequence, from 0")
    pipeline: str
    supervisor: str = Field(description="the supervisor that ran it")
    epoch: int = Field(description="the epoch of the assignment it ran")
    generation: int = Field(description="the pipeline's generation it ran")
    digest: str = Field(description="sha256 of the code it ran")
    pid: int | None = Field(default=None, description="the worker's process id")
    started: float = Field(description="wall-clock time it started, epoch seconds")
    ended: float | None = Field(default=None, description="when it ended; null while it runs")
    outcome: RunOutcome | None = Field(default=None, description="null while it runs")
    exit_code: int | None = Field(default=None, description="its exit code, if it exited")
    signal: str | None = Field(default=None, description="the signal that ended it (SIGKILL)")
    batches: int | None = Field(default=None, description="streaming batches it committed")
    rows: int | None = Field(default=None, description="input rows of its queries' batches")
    error: str | None = Field(
        default=None,
        description="its last error, the pipeline's own exception first; secrets redacted",
    )
    app_id: str | None = Field(default=None, description="its Spark application id")
    spark_ui: str | None = Field(default=None, description="its Spark UI's address, if on")
    log_dir: str | None = Field(
        default=None, description="the directory of its log on its supervisor's host"
    )
    inferred: bool = Field(
        default=False,
        description="its end was inferred from the assignment history: its supervisor died "
        "while it ran and never closed it",
    )

    @computed_field  # type: ignore[prop-decorator]
    @property
    def duration_secs(self) -> float | None:
        """Seconds from its start to its end; null while it runs."""
        return None if self.ended is None else max(0.0, self.ended - self.started)

    @property
    def exit(self) -> str | None:
        """How its process ended, as people read it: ``exit code 1``, ``SIGKILL``."""
        if self.signal is not None:
            return self.signal
        return None if self.exit_code is None else f"exit code {self.exit_code}"


class PipelineRuns(BaseModel):
    """A pipeline's runs kept (``pipeline.runs.keep``), newest first."""

    pipeline: str
    runs: list[RunRecord]


class SupervisorHeartbeat(StoredRecord):
    """What a supervisor reports at ``/supervisors/<id>`` of the cluster state store."""

    id: str
    time: float = Field(description="wall-clock time of the heartbeat")
    slots: int
    running: list[str] = Field(default_factory=list, description="pipelines it runs now")
    stopping: bool = Field(
        default=False,
        description="it is shutting down: it takes no new pipeline, and keeps its assignments "
        "until it comes back or is judged dead",
    )
    warm_ready: int = Field(
        default=0,
        ge=0,
        description="warm workers ready (their SparkSession up) for a pipeline placed here",
    )
    standby_workers: list[StandbyWorkerBeat] = Field(
        default_factory=list, description="the standby workers it runs, and their states"
    )
    beat_lease: BeatLease | None = Field(
        default=None,
        description="the fast beats' lease its hot workers run under, as its registration "
        "advertises it: the leader judges its beats from it even once the registration is "
        "gone (a new term after its host died); null: no fast beats, or an older release",
    )


class PipelineWorkers(BaseModel):
    """Where a pipeline runs and what its workers last reported."""

    pipeline: str
    assignment: Assignment | None
    workers: list[WorkerHeartbeat]
    standby_worker: StandbyWorkerView | None = Field(
        default=None,
        description="its standby worker: where the leader placed it (or why nowhere) and what "
        "that supervisor reports of it; null: the pipeline does not want one "
        "(pipeline.standby: none)",
    )

    def on_assigned(self) -> WorkerHeartbeat | None:
        """The heartbeat of the worker on the supervisor the pipeline is assigned to, if any."""
        if self.assignment is None:
            return None
        where = self.assignment.supervisor
        return next((beat for beat in self.workers if beat.supervisor == where), None)


class LeaderInfo(BaseModel):
    """Who leads the nimbuses now, and in which epoch; both null while nobody leads."""

    address: str | None
    epoch: int | None


class LeaderTerm(RewrittenRecord, StoredRecord):
    """One term of a nimbus's leadership, as the winner recorded it (``leader-terms/``).

    ``failover_secs`` is the leaderless gap before this term: from the previous leader's
    last sign of life to this term's grant (after its code check, when it may act). A
    previous leader that wrote its own end (it stepped down or stopped) was alive until it
    freed its slot; one that did not (killed, frozen, cut off) was last heard of by
    ZooKeeper one session timeout (``session_timeout_secs`` of its term) before its session
    expired and freed the slot, so that timeout is counted in. Null for the first term on
    record, and for a term granted by a failover controller (``nimbus.ha.mode: zkfc``),
    which measures no vacancy.
    """

    epoch: int = Field(description="the term's fencing epoch")
    nimbus: str = Field(description="host:port of the nimbus that led")
    started_at: float = Field(description="wall-clock time it began leading, epoch seconds")
    ended_at: float | None = Field(
        default=None, description="wall-clock time the term ended; null while it lasts"
    )
    failover_secs: float | None = Field(
        default=None,
        description="the leaderless gap: from the previous leader's last sign of life to "
        "this term's grant, seconds",
    )
    session_timeout_secs: float | None = Field(
        default=None, description="the ZooKeeper session timeout the leader was granted"
    )
    ended_by: str | None = Field(
        default=None,
        description="who wrote the end: `leader` (it stepped down or stopped) or `successor` "
        "(it died or lost its session; the end is its last sign of life, as in "
        "`failover_secs` of the next term)",
    )


class LeaderTerms(BaseModel):
    """The newest terms of leadership, newest first (the newest 100 are kept)."""

    terms: list[LeaderTerm]


class PipelineSummary(BaseModel):
    """One pipeline as the cluster summary lists it: what a list of pipelines shows.

    The rest of its record (its conf, kept versions, staged update, request ids) is the
    pipeline's own read, ``GET /api/v1/pipelines/{name}``, as a Storm topology's conf is not
    in Storm's cluster summary. Every field a ``PipelineRecord`` requires is here, with the
    record's meaning, so a client that reads the summary's pipelines as records (0.2.0 and
    earlier) still reads them."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    name: str
    status: PipelineStatus
    digest: str = Field(description="sha256 of the package, hex")
    size_bytes: int
    submitted: float = Field(description="wall-clock time of the submit, seconds since the epoch")
    updated: float = Field(description="wall-clock time of the last change")
    epoch: int = Field(description="leadership epoch of the nimbus that last wrote the record")
    rebalances: int = Field(default=0, description="how many times the pipeline was rebalanced")
    replication: int = Field(default=1, description="nimbuses holding the code")
    replication_required: int = Field(
        default=1, description="pipeline.min.replication.count for this pipeline"
    )
    reason: str | None = Field(
        default=None,
        description="why the pipeline FAILED, or a note on its activation short of the "
        "required replication; secrets redacted",
    )
    version: int = Field(default=1, description="the code version")
    owner: str | None = Field(
        default=None, description="the principal that submitted the pipeline (null: none known)"
    )
    owners: list[str] | None = Field(
        default=None,
        description="who owns the pipeline: its submitter first, then the principals of its "
        "conf's pipeline.owners (null: the answer of a nimbus older than this field, whose "
        "summary carried the whole record)",
    )

    @classmethod
    def of(cls, record: PipelineRecord, owners: list[str]) -> PipelineSummary:
        """``record`` as the summary lists it; ``owners`` as ``PipelineAccess.all_owners``
        reads them from its owner and conf."""
        return cls(
            name=record.name,
            status=record.status,
            digest=record.digest,
            size_bytes=record.size_bytes,
            submitted=record.submitted,
            updated=record.updated,
            epoch=record.epoch,
            rebalances=record.rebalances,
            replication=record.replication,
            replication_required=record.replication_required,
            reason=record.reason,
            version=record.version,
            owner=record.owner,
            owners=owners,
        )


class ClusterSummary(BaseModel):
    """The cluster summary: nimbuses (the leader marked), supervisors and pipelines."""

    nimbuses: list[NimbusSummary]
    supervisors: list[SupervisorSummary]
    pipelines: list[PipelineSummary] = Field(
        description="every pipeline, by name, with what a list shows; its whole record is "
        "GET /api/v1/pipelines/{name}"
    )
    leader: LeaderInfo
    cordons: list[SupervisorCordon] = Field(
        default_factory=list,
        description="the cordoned supervisors (those being drained have `drain`), by id",
    )


class PipelineList(BaseModel):
    pipelines: list[PipelineRecord]


class KillRequest(BaseModel):
    """Body of ``kill``: seconds until the record goes (default ``pipeline.kill.wait.secs``)."""

    model_config = ConfigDict(extra="forbid")

    wait_secs: float | None = Field(default=None, ge=0, le=86_400, strict=True)
    purge: bool = Field(
        default=False,
        strict=True,
        description="delete the pipeline's checkpoints with its record; without it they are "
        "kept, and a later submit of the same name resumes from them",
    )


class RebalanceRequest(BaseModel):
    """Body of ``rebalance``: conf keys to set on the pipeline (merged into its conf)."""

    model_config = ConfigDict(extra="forbid")

    conf: dict[str, Any] = Field(min_length=1)
    request_id: str = Field(
        default="",
        max_length=128,
        pattern=r"^[!-~]*$",
        description="client id that makes retries safe: a retry changes nothing",
    )


class RollbackRequest(BaseModel):
    """Body of ``rollback``: the kept version to run again (null: the one that ran before
    the current)."""

    model_config = ConfigDict(extra="forbid")

    to_version: int | None = Field(default=None, ge=1)
    request_id: str = Field(
        default="",
        max_length=128,
        pattern=r"^[!-~]*$",
        description="client id that makes retries safe: a retry changes nothing",
    )

    @field_validator("to_version", mode="before")
    @classmethod
    def _a_number(cls, value: Any) -> Any:
        """A JSON number (``4``, or ``4.0``), never a string or a boolean."""
        if value is None or (isinstance(value, int | float) and not isinstance(value, bool)):
            return value
        raise ValueError("to_version must be a version number")


class RestartRequest(BaseModel):
    """Body of ``restart``: only the request id that makes a retry change nothing."""

    model_config = ConfigDict(extra="forbid")

    request_id: str = Field(
        default="",
        max_length=128,
        pattern=r"^[!-~]*$",
        description="client id that makes retries safe: a retry changes nothing",
    )


class FenceRequest(BaseModel):
    """Body of a supervisor's ``POST /api/v1/fence``: the term of the leader that fences,
    and the supervisor it means to fence (another one refuses it)."""

    model_config = ConfigDict(extra="forbid")

    epoch: int = Field(ge=0, strict=True)
    supervisor: str = Field(min_length=1, strict=True, description="the id of the supervisor")


class FenceAnswer(BaseModel):
    """A supervisor's answer to a fence it obeyed: no worker process of it is left."""

    supervisor: str
    epoch: int
    stopped: list[str]  # the pipelines whose workers the fence stopped


MAX_FENCED_PIPELINES = 1024  # as many as one supervisor runs: supervisor.slots is at most 1024


class PipelineFenceRequest(BaseModel):
    """Body of a supervisor's ``POST /api/v1/fence/pipelines``: the term of the leader that
    fences, the supervisor it means (another one refuses it), and the pipelines whose workers
    there must stop; the supervisor's other workers, and its lease, are left alone."""

    model_config = ConfigDict(extra="forbid")

    epoch: int = Field(ge=0, strict=True)
    supervisor: str = Field(
        min_length=1, max_length=100, strict=True, description="the id of the supervisor"
    )
    pipelines: list[PipelineName] = Field(
        min_length=1,
        max_length=MAX_FENCED_PIPELINES,
        description="the pipelines to fence there, each named once",
    )

    @field_validator("pipelines")
    @classmethod
    def _each_once(cls, names: list[str]) -> list[str]:
        twice = sorted(name for name, count in Counter(names).items() if count > 1)
        if twice:
            raise ValueError(f"name each pipeline once ({', '.join(twice[:5])} more than once)")
        return names


class PipelineFenceAnswer(BaseModel):
    """A supervisor's answer to a pipeline fence it obeyed: no worker process of those
    pipelines is left there, and none starts again for the assignment it was fenced under."""

    supervisor: str
    epoch: int
    pipelines: list[str]  # the pipelines fenced, as asked, sorted
    stopped: list[str]  # those whose running workers the fence stopped


class ErrorBody(BaseModel):
    """Every error response: a stable code, a readable message, and for not_leader the leader."""

    error: str
    message: str
    leader: str | None = None
