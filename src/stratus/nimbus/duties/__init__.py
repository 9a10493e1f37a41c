"""The leader's duties: each one small class whose ``run(term)`` does one round of one job.

``DutyRound`` runs them in order for the leadership controller, each behind its own error
boundary: removing killed pipelines (``killed``), recording the purge of the checkpoints
they kept once the operator's retention is over (``checkpoint_retention``), seeing every
recorded purge through until whoever can write the checkpoint root did it (``purges``),
activating pipelines whose
code reached its replication (``replication``), failing pipelines whose code is lost
(``lost_code``), and the scheduling round (``scheduling``), whose parts stand beside it:
the heartbeats and their silences (``heartbeat_judge``, restarted after a new ZooKeeper
quorum by ``quorum_watch``), the fencing decisions (``round_fencing``), the standby workers'
promotions and placements (``standby_round``) and the workers' outcomes
(``worker_outcomes``).
"""
