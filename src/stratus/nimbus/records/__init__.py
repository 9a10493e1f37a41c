"""What the leader records of each pipeline in ZooKeeper, and the pure rules of its
changes: the records and their fenced operations (``pipeline_records``, ``pipeline_ops``),
kept versions and checkpoints, staged updates and their trial, which status refuses which
operation (``refusals``), the replication a pipeline needs, the purge plan, the
assignment history, and the runs every nimbus reads (``run_reads``).

The ground floor of the nimbus: imports no other part of it.
"""
