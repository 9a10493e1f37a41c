"""High availability of a service under a failover controller: the HA service protocol
(``protocol.py``) that a managed service implements, and ``stratus zkfc``'s parts."""
