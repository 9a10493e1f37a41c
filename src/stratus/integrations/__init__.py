"""Bridges from the APIs other libraries' users already call onto stratus's own.

``stratus.integrations.tooz`` is a tooz backend: ``tooz.coordination.get_coordinator(
"stratus://zk1:2181,zk2:2181/chroot", member_id)`` gives an OpenStack-style service
stratus's election, with its fencing epochs and its lost-leadership events.
"""
