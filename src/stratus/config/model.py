"""``StratusConfig``: every section in one frozen model, and the values derived from keys
of several sections.

The sections are mixins: ``StratusConfig`` inherits them all, so every key is a field of
the configuration itself (``conf.zookeeper_session_timeout_secs``, as before the sections)
and a file stays one flat mapping of dotted keys. pydantic takes the fields of the last
base first, so the bases are listed from the last section to the first: the keys, in
``valid_keys()`` and in errors, read in the order of docs/configuration.md's tables.
"""

from __future__ import annotations

from pydantic import ConfigDict, model_validator

from stratus.config.checks import check_keys_agree
from stratus.config.checks import check_pulse_ttl as _check_pulse_ttl
from stratus.config.client import ClientSection
from stratus.config.ha import ElectSection, HaSection
from stratus.config.heartbeats import ClusterSection, WorkerSection
from stratus.config.log import AuditSection, HistorySection, LogSection
from stratus.config.nimbus import NimbusSection
from stratus.config.pacemaker import PacemakerSection
from stratus.config.pipeline import PackageSection, PipelineSection
from stratus.config.section import Section
from stratus.config.supervisor import SupervisorSection
from stratus.config.zookeeper import ZookeeperSection


class StratusConfig(
    ElectSection,
    HaSection,
    HistorySection,
    AuditSection,
    LogSection,
    ClientSection,
    WorkerSection,
    SupervisorSection,
    PacemakerSection,
    ClusterSection,
    PipelineSection,
    PackageSection,
    NimbusSection,
    ZookeeperSection,
):
    """Every setting stratus reads, under its dotted name (the field alias)."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    @model_validator(mode="after")
    def _keys_agree(self) -> StratusConfig:
        check_keys_agree(self)
        return self

    def check_pulse_ttl(self) -> None:
        """``pacemaker.pulse.ttl.secs`` above both leader timeouts, else ``ValueError``
        (``checks.check_pulse_ttl``)."""
        _check_pulse_ttl(self)

    def supervisor_fence_after(self) -> float | None:
        """``nimbus.supervisor.fence.after.secs`` (None for 0: the leader never fences), or
        half of the supervisor timeout, when that is more than a round of the leader and a
        heartbeat period (else None)."""
        if self.nimbus_supervisor_fence_after_secs is not None:
            return self.nimbus_supervisor_fence_after_secs or None
        half = self.nimbus_supervisor_timeout_secs / 2
        if half <= self.nimbus_monitor_freq_secs + self.worker_heartbeat_frequency_secs:
            return None
        return half

    def checkpoint_root(self) -> str:
        """``pipeline.checkpoint.root``, or its default directory,
        ``<tmp>/stratus-checkpoints.<cluster>``."""
        if self.pipeline_checkpoint_root:
            return self.pipeline_checkpoint_root
        return str(self.cluster_default_dir("checkpoints"))

    def elect_stop_grace(self) -> float:
        """``elect.stop.grace.secs``, or its default for this session timeout."""
        if self.elect_stop_grace_secs is not None:
            return self.elect_stop_grace_secs
        return min(1.0, self.zookeeper_session_timeout_secs / 5)


def sections() -> list[type[Section]]:
    """The sections of ``StratusConfig``, first to last: the order of their keys."""
    return [base for base in reversed(StratusConfig.__mro__) if _is_section(base)]


def _is_section(cls: type) -> bool:
    return issubclass(cls, Section) and cls not in (Section, StratusConfig)
