"""The tree of a ZooKeeper that stratus runs, locked down once it serves.

A server that requires SASL admits only the identities it can check, but an admitted identity
may still do anything that the ACLs allow, and ZooKeeper's own znodes are open to anyone by
default: ``/`` (anyone may create beside stratus's root, or change ``/``'s ACL), ``/zookeeper``
and the quotas under ``/zookeeper/quota``. So, as the superuser, the server:

- creates stratus's root (and its parents), the root owned by stratus's users alone;
- gives ``/``, the root's parents, ``/zookeeper`` and the quota's znodes to nobody but the
  superuser: stratus's users may read them, nothing more;
- sets a hard quota on the root (``ZnodeQuota``): znodes and bytes beyond it are refused, so
  an identity that leaked cannot fill the server's memory and take every session with it.

It is idempotent: a restarted server runs it again and changes nothing::

    lock_down(server.connect_string, auth, superuser)
"""

from __future__ import annotations

import logging
import posixpath
from collections.abc import Iterator

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError
from kazoo.security import ACL, Id, Permissions

from stratus.zk.auth import AuthScheme, ServerAuth, ZkAuth, ZkCredentials

log = logging.getLogger(__name__)

QUOTA_ROOT = "/zookeeper/quota"
LIMITS_NODE = "zookeeper_limits"
STATS_NODE = "zookeeper_stats"
CONNECT_TIMEOUT_SECS = 15.0


def lock_down(hosts: str, auth: ServerAuth, superuser: ZkCredentials) -> None:
    """Lock ``/``, the root's parents, ``/zookeeper`` and the root's quota to ``superuser``,
    and the root to ``auth.users``; see the module docstring."""
    identity = ZkAuth(AuthScheme.SASL, superuser, sasl_mechanism="DIGEST-MD5")
    client = KazooClient(hosts=hosts, timeout=CONNECT_TIMEOUT_SECS, **identity.client_options())
    client.start(timeout=CONNECT_TIMEOUT_SECS)
    try:
        _lock(client, auth)
    finally:
        client.stop()
        client.close()
    log.info(
        "event=zookeeper_locked_down root=%s quota_znodes=%d quota_bytes=%d",
        auth.root,
        auth.quota.znodes,
        auth.quota.data_bytes,
    )


def _lock(client: KazooClient, auth: ServerAuth) -> None:
    owners = [ACL(Permissions.ALL, Id("sasl", user.user)) for user in auth.users]
    readers = [ACL(Permissions.READ, Id("sasl", user.user)) for user in auth.users]
    root = posixpath.normpath("/" + auth.root.strip("/"))
    for parent in _parents(root):
        _ensure(client, parent, readers)
    _ensure(client, root, owners, reset=False)  # the daemons keep their own tree's ACLs
    quota = QUOTA_ROOT + root
    for parent in _parents(quota):
        _ensure(client, parent, readers)
    _ensure(client, quota, readers)
    _ensure(client, f"{quota}/{LIMITS_NODE}", readers, auth.quota.limits_data())
    client.set(f"{quota}/{LIMITS_NODE}", auth.quota.limits_data())
    _ensure(client, f"{quota}/{STATS_NODE}", readers, b"count=0,bytes=0")
    client.set_acls("/", readers)


def _parents(path: str) -> Iterator[str]:
    """Every ancestor of ``path`` below ``/``, from the top: ``/a``, ``/a/b`` of ``/a/b/c``."""
    parts = path.strip("/").split("/")
    for end in range(1, len(parts)):
        yield "/" + "/".join(parts[:end])


def _ensure(
    client: KazooClient, path: str, acl: list[ACL], data: bytes = b"", *, reset: bool = True
) -> None:
    """Create ``path`` with ``acl``, or give an existing one ``acl`` (unless not ``reset``)."""
    try:
        client.create(path, data, acl=acl)
    except NodeExistsError:
        if reset:
            client.set_acls(path, acl)
