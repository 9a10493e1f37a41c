"""The leader's duties: each one small class whose ``run(term)`` does one round of one job.

``DutyRound`` runs them in order for the leadership controller, each behind its own error
boundary: removing killed pipelines (``killed``), deleting the checkpoints they kept once
the operator's retention is over (``checkpoint_retention``), activating pipelines whose
code reached its replication (``replication``), failing pipelines whose code is lost
(``lost_code``), and the scheduling round (``scheduling``).
"""
