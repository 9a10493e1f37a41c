"""A deliberately broken build, for the chaos suite's proof that its oracle catches a
broken safety rule: with this directory on ``PYTHONPATH``, every stratus process starts
with the supervisor's self-fencing turned off (its lease never lapses), so a supervisor cut
off from the cluster keeps its workers running while the leader starts them elsewhere."""

try:
    from stratus.supervisor.fence import Lease
except ImportError:  # a process that cannot import stratus has nothing to break
    pass
else:
    Lease.check = lambda self, now: False  # type: ignore[method-assign]
