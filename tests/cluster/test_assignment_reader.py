"""Reading the assignments (``supervisor/assignment_reader.py``) on real ZooKeeper: each
with its fencing token from the znode's stat."""

from __future__ import annotations

from stratus.supervisor.assignment_reader import read_assignments
from stratus.zk.paths import ClusterPaths
from tests.harness.supervisor_fakes import assignment
from tests.harness.zkfixtures import kazoo_client


def test_every_new_assignment_of_a_pipeline_reads_with_a_higher_token(zk_hosts: str) -> None:
    """A move by the same leader in one term, a re-stamp by a new leader, an unassign and a
    new placement: the token grows each time, though the epoch does not."""
    paths = ClusterPaths("/stratus")
    with kazoo_client(zk_hosts) as zk:
        zk.ensure_path(paths.assignments)
        writes = [
            ("create", assignment(supervisor="s1", epoch=3)),
            ("set", assignment(supervisor="s2", epoch=3)),  # moved within one term
            ("set", assignment(supervisor="s1", epoch=3)),  # and back
            ("set", assignment(supervisor="s1", epoch=4)),  # a new leader's re-stamp
            ("recreate", assignment(supervisor="s2", epoch=4)),  # deactivated, activated
        ]
        tokens = []
        for how, written in writes:
            path = paths.assignment(written.pipeline)
            if how == "set":
                zk.set(path, written.encode())
            else:
                if how == "recreate":
                    zk.delete(path)
                zk.create(path, written.encode())
            read = read_assignments(zk, paths).assignments["etl"]
            assert read.supervisor == written.supervisor
            assert read.token is not None
            tokens.append(read.token)
        assert [t.key() for t in tokens] == sorted({t.key() for t in tokens})
        assert len({t.era for t in tokens}) == 1  # one cluster
        assert b"token" not in zk.get(paths.assignment("etl"))[0]  # never stored
