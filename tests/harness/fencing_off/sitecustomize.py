"""A deliberately broken build, for the chaos suite's proof that its oracle catches a
broken safety rule: with this directory on ``PYTHONPATH``, every stratus process starts
with the supervisors' and workers' fencing turned off: a supervisor's lease never lapses,
its workers never see it lapse, and a worker never finds a higher claim on its checkpoint.
A supervisor cut off from the cluster keeps its workers running while the leader starts
them elsewhere.

Only the verdicts are turned off: a worker still makes its checkpoint location and writes
its claim there, as the rest of its start (the location's origin, Spark) expects."""

try:
    from stratus.supervisor.heartbeat_lease import HeartbeatLease
    from stratus.worker import checkpoint_owner
    from stratus.worker.lease_file import LeaseWatch
except ImportError:  # a process that cannot import stratus has nothing to break
    pass
else:
    HeartbeatLease.check = lambda self, now: False  # type: ignore[method-assign]
    LeaseWatch.lapsed = lambda self: None  # type: ignore[method-assign]
    checkpoint_owner._highest_above = lambda tokens, own: None  # no claim is ever higher
