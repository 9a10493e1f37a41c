"""What a caller may do: ``read`` < ``submit`` < ``admin``, each role allowing the ones below.

``read`` sees the cluster, the pipelines, the leader, metrics and packages; ``submit`` also
submits, updates, kills, activates, deactivates and rebalances; ``admin`` may make every call::

    Role.SUBMIT.allows(Role.READ)     # True
    Role.READ.allows(Role.SUBMIT)     # False
"""

from __future__ import annotations

import enum


class Role(enum.Enum):
    READ = "read"
    SUBMIT = "submit"
    ADMIN = "admin"

    @property
    def rank(self) -> int:
        return _RANK[self]

    def allows(self, needed: Role) -> bool:
        """Whether a caller with this role may make a call that needs ``needed``."""
        return self.rank >= needed.rank


_RANK = {Role.READ: 0, Role.SUBMIT: 1, Role.ADMIN: 2}
ROLE_NAMES = ", ".join(role.value for role in Role)
