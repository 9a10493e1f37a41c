"""Errors of the worker: each message names the pipeline's problem and what to change."""

from __future__ import annotations

from stratus.errors import StratusError


class WorkerError(StratusError):
    """Base of the worker's errors; the message becomes the FAILED heartbeat's ``error``."""


class EntrypointError(WorkerError):
    """An app's ``module:function`` cannot be loaded: no such module, function, or callable."""


class SdpProjectError(WorkerError):
    """An sdp pipeline's project file is missing or not a Spark Declarative Pipelines spec."""


class SparkStartError(WorkerError):
    """Spark did not start (a bad master, a missing Java, a refused setting)."""


class PromotionError(WorkerError):
    """A standby worker's promotion file is unreadable, or does not fit what the standby
    worker prepared (another pipeline, other code, another session): it claims nothing."""
