"""A nimbus's leadership: the controller that owns it (``leadership_controller``), the
leader lock it holds (``election_queue`` when it elects itself, ``granted_lock`` under a
zkfc), whether it may lead (``readiness``) and is healthy (``health``), its side of the HA
service protocol (``ha_service``), and the record of terms (``leader_terms``,
``leader_trail``).

May import ``settings`` and what lies below it (``records``, ``metrics``,
``cluster_view``); never ``scheduling``, ``duties``, ``service``, ``ui`` or ``http``: the
controller runs the duties through its small ``Duties`` interface.
"""
