"""The znode layout: every path stratus uses is built here and nowhere else."""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

_GROUP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,199}$")
NIMBUS_GROUP = "nimbus"  # the election group of the nimbuses: ``<root>/groups/nimbus``


def join(*parts: str) -> str:
    """Join znode path parts into one absolute, normalised path."""
    return posixpath.normpath("/" + "/".join(part.strip("/") for part in parts if part))


def check_group_name(group: str) -> str:
    """Return ``group`` if it is a valid election group name, else raise ``ValueError``."""
    if not _GROUP_NAME.match(group):
        raise ValueError(
            f"invalid group name {group!r}: use 1-200 letters, digits and _ . : @ -, "
            "starting with a letter or digit"
        )
    return group


@dataclass(frozen=True)
class GroupPaths:
    """Where one election group lives under the coordination root.

    ``<root>/groups/<group>``            persistent, data = the group's leader count
    ``.../candidates/m-<seq>``           ephemeral sequential, one per candidate (the queue)
    ``.../slots/<k>``                    ephemeral, held by the leader of slot k (0 <= k < N)
    ``.../epochs/<k>``                   persistent; its version is slot k's epoch (fencing token)
    ``.../terms/t-<seq>``                persistent sequential, one per term won (leader changes)
    ``.../breadcrumb``                   persistent, the active's data (ActiveStandbyElector)
    ``.../preferred``                    ephemeral, the preferred node's data while it campaigns
    ``.../zkfcs/<service host:port>``    ephemeral, the endpoint (host:port) of that service's zkfc
    """

    root: str
    group: str

    @property
    def base(self) -> str:
        return join(self.root, "groups", check_group_name(self.group))

    @property
    def candidates(self) -> str:
        return join(self.base, "candidates")

    @property
    def candidate_prefix(self) -> str:
        return join(self.candidates, "m-")

    @property
    def slots(self) -> str:
        return join(self.base, "slots")

    def slot(self, index: int) -> str:
        return join(self.slots, str(index))

    @property
    def epochs(self) -> str:
        return join(self.base, "epochs")

    def epoch(self, index: int) -> str:
        return join(self.epochs, str(index))

    @property
    def terms(self) -> str:
        return join(self.base, "terms")

    @property
    def term_prefix(self) -> str:
        return join(self.terms, "t-")

    @property
    def breadcrumb(self) -> str:
        return join(self.base, "breadcrumb")

    @property
    def preferred(self) -> str:
        return join(self.base, "preferred")

    @property
    def zkfcs(self) -> str:
        return join(self.base, "zkfcs")

    def zkfc(self, service: str) -> str:
        return join(self.zkfcs, service)


RUN_NODE_PREFIX = "run-"


def sequence_of(node_name: str) -> int:
    """The sequence number ZooKeeper appended to a sequential node's name."""
    return int(node_name[-10:])


@dataclass(frozen=True)
class ClusterPaths:
    """Where the cluster's own state lives under the root (the election lives in ``groups/``).

    ``<root>/nimbuses/<host:port>``     ephemeral, NimbusRegistration of each running nimbus
    ``<root>/pipelines/<name>``         persistent, PipelineRecord, written by the leader only
    ``<root>/supervisors/<id>``         ephemeral, supervisor registration
    ``<root>/code/<name>/<host:port>``  ephemeral, which nimbuses hold a pipeline's code
    ``<root>/assignments/<name>``       persistent, Assignment: where a pipeline runs
    ``<root>/assignment-history/<name>/c-<seq>``  persistent sequential, AssignmentChange of
                                        each change of that assignment (the newest)
    ``<root>/kept-checkpoints/<name>``  persistent, KeptCheckpoints: a removed pipeline's kept
                                        checkpoints, until their retention ends or a submit
    ``<root>/cordons/<id>``             persistent, SupervisorCordon: a supervisor that takes no
                                        new pipeline (and, drained, loses its own)
    ``<root>/purges/<name>``            persistent, PurgeOrder: ``<checkpoint root>/<name>`` is to
                                        be deleted; written by the leader only, removed once done
    ``<root>/purge-outcomes/<name>.<id>.<n>``  persistent, PurgeOutcome: a supervisor's
                                        answer to attempt n of order id (removed with it)
    ``<root>/standby-workers/<name>``   persistent, StandbyWorkerPlacement: where a pipeline's
                                        standby worker waits; written by the leader only
    ``<root>/heartbeats/...``           the ZooKeeper cluster state store's own paths
    ``<root>/leader-terms/<epoch>``     persistent, LeaderTerm of each nimbus term (the newest)
    ``<root>/runs/<name>/run-<seq>``    persistent sequential, RunRecord of each run of a
                                        pipeline (the newest ``pipeline.runs.keep``), written
                                        by the supervisor that runs it; deleted with a purge
    """

    root: str

    @property
    def nimbuses(self) -> str:
        return join(self.root, "nimbuses")

    def nimbus(self, address: str) -> str:
        return join(self.nimbuses, address)

    @property
    def pipelines(self) -> str:
        return join(self.root, "pipelines")

    def pipeline(self, name: str) -> str:
        return join(self.pipelines, name)

    @property
    def supervisors(self) -> str:
        return join(self.root, "supervisors")

    def supervisor(self, supervisor_id: str) -> str:
        return join(self.supervisors, supervisor_id)

    @property
    def code(self) -> str:
        return join(self.root, "code")

    def code_holders(self, pipeline: str) -> str:
        return join(self.code, pipeline)

    def code_holder(self, pipeline: str, address: str) -> str:
        return join(self.code_holders(pipeline), address)

    @property
    def assignments(self) -> str:
        return join(self.root, "assignments")

    @property
    def leader_terms(self) -> str:
        return join(self.root, "leader-terms")

    def leader_term(self, epoch: int) -> str:
        """A term's node, named by its epoch zero-padded so that names sort as epochs do."""
        return join(self.leader_terms, f"{epoch:010d}")

    def assignment(self, pipeline: str) -> str:
        return join(self.assignments, pipeline)

    @property
    def assignment_histories(self) -> str:
        return join(self.root, "assignment-history")

    def assignment_history(self, pipeline: str) -> str:
        """The parent of one pipeline's assignment changes (created with its first change)."""
        return join(self.assignment_histories, pipeline)

    def assignment_change_prefix(self, pipeline: str) -> str:
        """Prefix of a change's sequential node: ``c-`` and ZooKeeper's ten digits."""
        return join(self.assignment_history(pipeline), "c-")

    @property
    def kept_checkpoints(self) -> str:
        return join(self.root, "kept-checkpoints")

    def kept_checkpoint(self, pipeline: str) -> str:
        return join(self.kept_checkpoints, pipeline)

    @property
    def cordons(self) -> str:
        return join(self.root, "cordons")

    def cordon(self, supervisor_id: str) -> str:
        return join(self.cordons, supervisor_id)

    @property
    def purges(self) -> str:
        return join(self.root, "purges")

    def purge(self, pipeline: str) -> str:
        return join(self.purges, pipeline)

    @property
    def purge_outcomes(self) -> str:
        return join(self.root, "purge-outcomes")

    def purge_outcome(self, node: str) -> str:
        """An outcome's node, named ``<pipeline>.<order id>.<attempt>``
        (``PurgeOutcome.node_name``)."""
        return join(self.purge_outcomes, node)

    @property
    def runs(self) -> str:
        return join(self.root, "runs")

    def pipeline_runs(self, pipeline: str) -> str:
        """The parent of one pipeline's runs (created with its first run)."""
        return join(self.runs, pipeline)

    def run_prefix(self, pipeline: str) -> str:
        """Prefix of a run's sequential node: ``run-`` and ZooKeeper's ten digits."""
        return join(self.pipeline_runs(pipeline), RUN_NODE_PREFIX)

    def run(self, pipeline: str, number: int) -> str:
        return join(self.pipeline_runs(pipeline), f"{RUN_NODE_PREFIX}{number:010d}")

    @property
    def standby_workers(self) -> str:
        return join(self.root, "standby-workers")

    def standby_worker(self, pipeline: str) -> str:
        return join(self.standby_workers, pipeline)

    @property
    def heartbeats(self) -> str:
        """Root of the ZooKeeper cluster state store (``cluster.state.store: zookeeper``)."""
        return join(self.root, "heartbeats")

    def all_parents(self) -> tuple[str, ...]:
        """Every persistent parent znode, created once at start-up."""
        return (
            self.nimbuses,
            self.pipelines,
            self.supervisors,
            self.code,
            self.assignments,
            self.assignment_histories,
            self.kept_checkpoints,
            self.cordons,
            self.purges,
            self.purge_outcomes,
            self.heartbeats,
            self.leader_terms,
            self.runs,
            self.standby_workers,
        )
