"""A deliberately broken build, for the chaos suite's proof that its oracle catches a
broken safety rule: with this directory on ``PYTHONPATH``, every stratus process starts
with the supervisors' and workers' fencing turned off: a supervisor's lease never lapses,
its workers never see it lapse, and a worker never finds a higher claim on its checkpoint.
A supervisor cut off from the cluster keeps its workers running while the leader starts
them elsewhere."""

try:
    from stratus.supervisor.fence import Lease
    from stratus.worker.checkpoint_owner import CheckpointOwners
    from stratus.worker.lease_file import LeaseWatch
except ImportError:  # a process that cannot import stratus has nothing to break
    pass
else:
    Lease.check = lambda self, now: False  # type: ignore[method-assign]
    LeaseWatch.lapsed = lambda self: None  # type: ignore[method-assign]
    CheckpointOwners.claim = lambda self, note=None: None  # type: ignore[method-assign]
    CheckpointOwners.higher = lambda self: None  # type: ignore[method-assign]
