"""A deliberately broken build, for the chaos suite's proof that its oracle catches a
broken safety rule: with this directory on ``PYTHONPATH``, every stratus process starts
with fencing turned off: a supervisor's lease never lapses, and its workers never see it
lapse, so a supervisor cut off from the cluster keeps its workers running while the leader
starts them elsewhere."""

try:
    from stratus.supervisor.fence import Lease
    from stratus.worker.lease_file import LeaseWatch
except ImportError:  # a process that cannot import stratus has nothing to break
    pass
else:
    Lease.check = lambda self, now: False  # type: ignore[method-assign]
    LeaseWatch.lapsed = lambda self: None  # type: ignore[method-assign]
