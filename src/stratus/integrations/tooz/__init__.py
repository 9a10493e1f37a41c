"""A tooz backend on stratus's election library: ``stratus://`` URLs for tooz users.

``tooz.coordination.get_coordinator("stratus://zk1:2181,zk2:2181/app?timeout=5", b"me")``
returns a ``StratusDriver`` (tooz's ``tooz.backends`` entry point ``stratus``). See
``driver`` and ``docs/tooz.md``.
"""

from stratus.integrations.tooz.driver import StratusDriver
from stratus.integrations.tooz.events import LeadershipLost, StratusLeaderElected

__all__ = ["LeadershipLost", "StratusDriver", "StratusLeaderElected"]
