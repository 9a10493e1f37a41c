"""The leader's fast failover lane, for pipelines that have a standby worker: the failure
detector that judges their supervisors from fast beats (``phi``), the watch that feeds it
the beats read from the pacemakers (``beat_watch``), the pure plan of which standby workers
to promote (``promotion_plan``), the promotion's fenced transaction (``promotion``), the
lane's thread (``lane``), the memory of the refusals it has told (``refusals``), and the
pure plan of which hot pipelines' new generations wait for their standby worker or go to it
(``update_moves``), and the verdict that withdraws a held update its standby worker failed
(``update_withdrawal``).

May import ``submission``, ``leadership``, ``scheduling``, ``local_dir``, ``settings`` and
what lies below them; never ``duties``, ``service``, ``ui`` or ``http``, which stand above.
"""
