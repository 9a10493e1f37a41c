"""The leader's fast failover lane, for pipelines that have a standby worker: the failure
detector that judges their supervisors from fast beats (``phi``) now; the watch of those
beats and the promotion of a standby worker later.

May import ``submission``, ``leadership``, ``scheduling``, ``local_dir``, ``settings`` and
what lies below them; never ``duties``, ``service``, ``ui`` or ``http``, which stand above.
"""
