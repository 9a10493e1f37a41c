"""A file a supervisor hands a worker of another user (a standby worker's ``promote.json``):
the worker's user reads it, and nobody else does.

Real users (root only): a worker user, and a member of the supervisor's group, which may enter
the worker's ``work`` directory. A root supervisor makes the file the worker's own (0600); a
supervisor that is not root (a user of its own, running the helper in a process of that
user) keeps it as its own, readable by others (0604), of whom only the worker enters ``work``.
"""

from __future__ import annotations

import os
import pwd
import stat
import subprocess
from pathlib import Path

from stratus.supervisor.worker_access import (
    WORK_DIR,
    hand_to_worker,
    prepare_worker,
    resolve_user,
)
from stratus.worker.promotion import PROMOTE_FILE
from tests.harness.worker_users import (
    needs_root,
    os_group,
    os_users,
    traversable_dir,
    worker_python,
)

pytestmark = needs_root

SPEC = b'{"pipeline": "etl"}'
PROMOTION = b'{"pipeline": "etl", "role": "active"}'


def read_as(name: str, path: Path) -> subprocess.CompletedProcess[bytes]:
    """``cat path`` as the user ``name`` (its own groups only)."""
    entry = pwd.getpwnam(name)
    return subprocess.run(
        ["cat", str(path)],
        user=entry.pw_uid,
        group=entry.pw_gid,
        extra_groups=os.getgrouplist(name, entry.pw_gid),
        capture_output=True,
        check=False,
    )


def test_a_root_supervisor_hands_the_promotion_to_the_worker_as_its_own_file() -> None:
    with traversable_dir() as base, os_users(2) as (worker, daemon), os_group([daemon]) as gid:
        user = resolve_user(worker, min_uid=1000, group=gid)
        directory = base / "workers" / "etl"
        prepare_worker(directory, SPEC, user, group=gid, checkpoint_dir=None)
        promotion = directory / WORK_DIR / PROMOTE_FILE

        hand_to_worker(directory / WORK_DIR, PROMOTE_FILE, PROMOTION)

        info = promotion.stat()
        assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (user.uid, 0o600)
        assert read_as(worker, promotion).stdout == PROMOTION
        assert read_as(daemon, promotion).returncode != 0  # the supervisor's group: no


def test_a_supervisor_that_is_not_root_hands_it_readable_by_the_worker_alone() -> None:
    with (
        traversable_dir() as base,
        os_users(3) as (worker, supervisor, daemon),
        os_group([supervisor, daemon]) as gid,
    ):
        user = resolve_user(worker, min_uid=1000, group=gid)
        directory = base / "workers" / "etl"
        directory.mkdir(parents=True)
        os.chown(directory, pwd.getpwnam(supervisor).pw_uid, gid)
        prepare_worker(directory, SPEC, user, group=gid, checkpoint_dir=None)  # the launcher
        promotion = directory / WORK_DIR / PROMOTE_FILE
        entry = pwd.getpwnam(supervisor)
        script = (
            "import sys; from pathlib import Path; "
            "from stratus.supervisor.worker_access import hand_to_worker; "
            "hand_to_worker(Path(sys.argv[1]), sys.argv[2], sys.argv[3].encode())"
        )

        work = str(directory / WORK_DIR)
        subprocess.run(
            [worker_python(base), "-c", script, work, PROMOTE_FILE, PROMOTION.decode()],
            user=entry.pw_uid,
            group=entry.pw_gid,
            extra_groups=[gid],
            check=True,
            cwd=base,
        )

        info = promotion.stat()
        assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (entry.pw_uid, 0o604)
        assert read_as(worker, promotion).stdout == PROMOTION
        assert read_as(daemon, promotion).returncode != 0  # the supervisor's group: no
