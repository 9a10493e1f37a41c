"""What the tests of ZooKeeper ACLs share: the credentials file, a client that
authenticates with digest, and the walk that reads the ACL of every znode under a root::

    secret = secret_file(tmp_path / "zk.secret", "stratus:s3cret")
    with digest_client(hosts, ZkCredentials("stratus", "s3cret")) as owner:
        acls = {path: acl_of(owner, path) for path in every_znode(owner, "/stratus")}
    assert set(acls.values()) == {digest_identity(ZkCredentials("stratus", "s3cret"))}
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from kazoo.security import make_digest_acl

from stratus.zk.auth import AuthScheme, ZkAuth, ZkCredentials
from tests.harness.zkfixtures import kazoo_client


def secret_file(path: Path, line: str, mode: int = 0o600) -> Path:
    """``line`` in a file of ``mode`` (0600: what stratus accepts for a secret)."""
    path.write_text(line + "\n", encoding="utf-8")
    path.chmod(mode)
    return path


def digest_client(hosts: str, credentials: ZkCredentials, **options: Any) -> Any:
    """A started kazoo client (a context manager) that authenticated with ``credentials``."""
    auth = [("digest", f"{credentials.user}:{credentials.password}")]
    return kazoo_client(hosts, auth_data=auth, **options)


def sasl_client(hosts: str, credentials: ZkCredentials, **options: Any) -> Any:
    """A started kazoo client (a context manager) that authenticated with SASL DIGEST-MD5."""
    identity = ZkAuth(AuthScheme.SASL, credentials, sasl_mechanism="DIGEST-MD5")
    return kazoo_client(hosts, **identity.client_options(), **options)


def sasl_identity(credentials: ZkCredentials) -> set[tuple[int, str, str]]:
    """The ACL that gives ``credentials``' SASL identity every permission, and nobody else."""
    return {(31, "sasl", credentials.user)}


def every_znode(client: KazooClient, root: str) -> Iterator[str]:
    """``root`` and every znode under it, parents before children."""
    yield root
    for child in client.get_children(root):
        yield from every_znode(client, posixpath.join(root, child))


def acl_of(client: KazooClient, path: str) -> set[tuple[int, str, str]]:
    """The ACL of ``path`` as (perms, scheme, id) triples."""
    return {(acl.perms, acl.id.scheme, acl.id.id) for acl in client.get_acls(path)[0]}


def digest_identity(credentials: ZkCredentials) -> set[tuple[int, str, str]]:
    """The ACL that gives ``credentials``' digest identity every permission, and nobody else."""
    acl = make_digest_acl(credentials.user, credentials.password, all=True)
    return {(acl.perms, acl.id.scheme, acl.id.id)}
