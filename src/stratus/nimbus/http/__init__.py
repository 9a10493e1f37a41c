"""The nimbus's HTTP side: the API app (``api``) and its routes, what guards them
(``authorization``, ``limits``, ``json_bodies``, ``upload_spool``), how it answers an
error (``api_errors``), where and whether it may listen (``listening``, ``exposure``), and
the log a caller reads relayed from a supervisor's endpoint (``log_relay``).

May import every other part of the nimbus but ``daemon``, which builds it: ``ui``,
``service``, ``leadership``, ``scheduling``, ``records``, ``settings``, ``metrics``.
Nothing else in the nimbus imports it.
"""
