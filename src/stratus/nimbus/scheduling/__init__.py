"""Where pipelines run: the pure planner of one round (``scheduler``), the assignments it
writes (``assignments``) and reads back (``placement``), cordons, the leader's memory of
heartbeats (``liveness``), the fence of a silent supervisor (``supervisor_fencing``, which
reaches it as ``supervisor_endpoints`` says), and what the rounds observe of each pipeline
(``pipeline_metrics``, ``batch_metrics``, ``pipeline_series``, and a standby's own
``series_sampler``).

May import ``settings`` and what lies below it (``records``, ``metrics``,
``cluster_view``); never ``leadership``, ``duties``, ``service``, ``ui`` or ``http``.
"""
