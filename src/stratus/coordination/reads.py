"""Reads of a group's queue and slots, for any client (participant or not)."""

from __future__ import annotations

import posixpath
from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from stratus.coordination.records import CandidateRecord, Leader, SlotRecord
from stratus.zk.paths import GroupPaths, sequence_of


def read_leaders(client: KazooClient, paths: GroupPaths) -> list[Leader]:
    """Every current leader of the group, by slot."""
    return [SlotRecord.decode(raw).as_leader() for raw in children_data(client, paths.slots, int)]


def read_candidates(client: KazooClient, paths: GroupPaths) -> list[str]:
    """The member ids of every candidate of the group, leaders included, in queue order."""
    raws = children_data(client, paths.candidates, sequence_of)
    return [CandidateRecord.decode(raw).member_id for raw in raws]


def children_data(client: KazooClient, parent: str, order: Callable[[str], int]) -> list[bytes]:
    """The data of ``parent``'s children, ordered by ``order`` of their names; none if absent."""
    try:
        names = client.get_children(parent)
    except NoNodeError:
        return []
    found = []
    for name in sorted(names, key=order):
        try:
            raw, _ = client.get(posixpath.join(parent, name))
        except NoNodeError:
            continue  # gone since the listing
        found.append(raw)
    return found
