"""Workers as other users: which user a pipeline's worker gets, and how the supervisor reaches it.

With ``supervisor.worker.run.as`` `pool`, each running pipeline takes a user of
``supervisor.worker.users`` that no other running pipeline of this supervisor has (the one
it had last time, if free), and gives it back once its worker has exited and every process
of that user is killed; with `shared`, every worker runs as the one user listed. Starting a
process as another user, signalling it and killing what it left behind need privilege, got
one of two ways (``SWITCHES``, chosen by ``supervisor.worker.launcher``):

- ``direct``: the supervisor runs as root; it prepares the worker's files itself and starts
  the worker with setgid, setgroups and setuid in the child (no capability survives), then
  signals it itself;
- ``sudo``: the supervisor runs as its own user and runs the worker launcher
  (``stratus.supervisor.worker_launcher``) through ``sudo -n`` for each of these steps; the
  launcher checks the user against its own root-owned configuration::

    pool = UserPool.from_settings(settings.users, group=os.getgid())  # None: as the supervisor
    pool = user_pool_at_start(settings.users, "s1", workers_dir=local / "workers",
                              interpreter=Path(sys.executable), checkpoint_root=root)
    run_as = pool.take("etl")           # RunAs; WorkerUserError when every user is busy
    argv, popen = run_as.switch.command(argv, directory=paths.directory, pipeline="etl", ...)
    run_as.switch.signal(run_as.user, group, signal.SIGTERM, whole_group=False)
    run_as.finished()                                  # its user's processes killed, user freed
"""

from __future__ import annotations

import json
import logging
import os
import pwd
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from stratus.checkpoints import local_pipeline_directory, remove_checkpoints
from stratus.files import write_atomically
from stratus.process import SignalTarget
from stratus.supervisor.errors import SupervisorStartError, WorkerUserError
from stratus.supervisor.settings import UserSettings
from stratus.supervisor.worker_access import (
    ENV_FILE,
    WORK_DIR,
    WORKER_UMASK,
    WorkerUser,
    closed_to_others,
    kill_user_processes,
    prepare_worker,
    resolve_user,
    take_checkpoints,
)

log = logging.getLogger(__name__)

LAUNCHER_TIMEOUT_SECS = 10.0  # a signal or a clean-up through the launcher
PURGE_TIMEOUT_SECS = 600.0  # a purge of a pipeline's checkpoints through the launcher


class UserSwitch(Protocol):
    """How the supervisor prepares, starts, signals and cleans up after a worker of another
    user."""

    name: str
    passes_descriptors: bool  # the worker inherits what is passed to it (``pass_fds``)

    def prepare(
        self, directory: Path, spec: bytes, user: WorkerUser, checkpoint_dir: Path | None
    ) -> None: ...

    def command(
        self,
        argv: Sequence[str],
        *,
        directory: Path,
        pipeline: str,
        user: WorkerUser,
        env: Mapping[str, str],
        checkpoints: bool = True,
    ) -> tuple[list[str], dict[str, Any]]:
        """How to start ``argv`` as ``user``; with ``checkpoints``, the pipeline's local
        checkpoint directory is given to it first (a standby worker's start does not)."""
        ...

    def take_checkpoints(self, pipeline: str, work: Path, checkpoint_dir: Path) -> None:
        """Give ``checkpoint_dir`` to the user that owns ``work``, the own directory of
        ``pipeline``'s standby worker being promoted (``worker_access.take_checkpoints``);
        WorkerUserError if refused."""
        ...

    def signal(
        self, user: WorkerUser, group: SignalTarget, signum: int, *, whole_group: bool
    ) -> None: ...

    def kill_all(self, user: WorkerUser) -> None: ...

    def group_kill_command(self, user: WorkerUser) -> list[str] | None:
        """How a worker's monitor SIGKILLs what its worker left in its process group (the
        pid, ``SIGKILL`` and ``--all`` appended); None: the monitor may do it itself."""
        ...

    def purge_checkpoints(self, root: str, pipeline: str) -> None:
        """Delete ``<root>/<pipeline>`` with the rights over every worker user's files (a
        purge that the supervisor's own rights could not do); WorkerUserError if refused."""
        ...


class DirectSwitch:
    """The supervisor is root: it does each step itself."""

    name = "direct"
    passes_descriptors = True

    def __init__(self, group: int) -> None:
        self._group = group

    def prepare(
        self, directory: Path, spec: bytes, user: WorkerUser, checkpoint_dir: Path | None
    ) -> None:
        prepare_worker(directory, spec, user, group=self._group, checkpoint_dir=checkpoint_dir)

    def command(
        self,
        argv: Sequence[str],
        *,
        directory: Path,
        pipeline: str,
        user: WorkerUser,
        env: Mapping[str, str],
        checkpoints: bool = True,  # prepare gave them already, or not
    ) -> tuple[list[str], dict[str, Any]]:
        # setgroups, setgid and setuid happen in the child between fork and exec, in C:
        # no Python runs there (the supervisor's kazoo threads), no capability survives.
        popen = {
            "cwd": directory / WORK_DIR,
            "env": dict(env),
            "user": user.uid,
            "group": user.gid,
            "extra_groups": user.groups(),
            "umask": WORKER_UMASK,
        }
        return list(argv), popen

    def take_checkpoints(self, pipeline: str, work: Path, checkpoint_dir: Path) -> None:
        take_checkpoints(work, checkpoint_dir, group=self._group)

    def signal(
        self, user: WorkerUser, group: SignalTarget, signum: int, *, whole_group: bool
    ) -> None:
        if whole_group:
            group.signal_group(signum)
        else:
            group.signal(signum)

    def kill_all(self, user: WorkerUser) -> None:
        kill_user_processes(user.uid)

    def group_kill_command(self, user: WorkerUser) -> list[str] | None:
        return None  # the monitor runs as root, as its supervisor

    def purge_checkpoints(self, root: str, pipeline: str) -> None:
        remove_checkpoints(root, pipeline)  # as root: the worker users' files too


class SudoSwitch:
    """The supervisor is not root: each step is the worker launcher, run through sudo."""

    name = "sudo"
    passes_descriptors = False  # sudo closes every descriptor but the standard three

    def __init__(self, command: Sequence[str]) -> None:
        self._command = list(command)

    def prepare(
        self, directory: Path, spec: bytes, user: WorkerUser, checkpoint_dir: Path | None
    ) -> None:
        """Nothing: the launcher prepares the worker's files as it starts it."""

    def command(
        self,
        argv: Sequence[str],
        *,
        directory: Path,
        pipeline: str,
        user: WorkerUser,
        env: Mapping[str, str],
        checkpoints: bool = True,
    ) -> tuple[list[str], dict[str, Any]]:
        # sudo resets the environment and closes other descriptors: the worker's environment
        # (pipeline.env.* secrets included) goes through a file only the supervisor reads,
        # never on a command line that every user of the host can see.
        write_atomically(directory / ENV_FILE, json.dumps(dict(env)).encode())
        verb = "launch" if checkpoints else "launch-standby"
        launch = [*self._command, verb, pipeline, user.name, "--", *argv]
        return launch, {"cwd": directory, "env": {"PATH": os.environ.get("PATH", os.defpath)}}

    def signal(
        self, user: WorkerUser, group: SignalTarget, signum: int, *, whole_group: bool
    ) -> None:
        if group.returncode is not None and not whole_group:
            return
        name = signal.Signals(signum).name
        extra = ["--all"] if whole_group else []
        self._run(["signal", user.name, str(group.pid), name, *extra])

    def kill_all(self, user: WorkerUser) -> None:
        self._run(["kill-user", user.name])

    def group_kill_command(self, user: WorkerUser) -> list[str] | None:
        return [*self._command, "signal", user.name]

    def purge_checkpoints(self, root: str, pipeline: str) -> None:
        """The launcher deletes ``<its pipeline.checkpoint.root>/<pipeline>``, if that root is
        ``root``: it never takes a root from its caller."""
        self._require(["purge", pipeline, root], "purge", PURGE_TIMEOUT_SECS)

    def take_checkpoints(self, pipeline: str, work: Path, checkpoint_dir: Path) -> None:
        """The launcher gives ``<its pipeline.checkpoint.root>/<pipeline>`` to the user that
        owns the pipeline's worker directory: it never takes a user or a root from its
        caller."""
        self._require(["take-checkpoints", pipeline], "hand the checkpoints over")

    def _require(self, args: list[str], what: str, timeout: float = LAUNCHER_TIMEOUT_SECS) -> None:
        """Run the launcher with ``args``; WorkerUserError, naming ``what``, unless it did."""
        try:
            done = subprocess.run(
                [*self._command, *args],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=timeout,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise WorkerUserError(f"the worker launcher could not {what}: {exc!r}") from None
        if done.returncode != 0:
            error = done.stderr.decode(errors="replace").strip()[-500:]
            raise WorkerUserError(
                f"the worker launcher refused to {what} (exit {done.returncode}): {error}"
            )

    def _run(self, args: list[str]) -> None:
        try:
            done = subprocess.run(
                [*self._command, *args],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=LAUNCHER_TIMEOUT_SECS,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            log.warning("event=worker_launcher_failed args=%r error=%r", args, exc)
            return
        if done.returncode != 0:
            log.warning(
                "event=worker_launcher_refused args=%r code=%d error=%r",
                args,
                done.returncode,
                done.stderr.decode(errors="replace").strip()[-500:],
            )


def _direct(settings: UserSettings, euid: int, group: int) -> UserSwitch:
    if euid != 0:
        raise WorkerUserError(
            "supervisor.worker.launcher is `direct` but the supervisor is not root: "
            "run it as root, or use `sudo` with the worker launcher (docs/security.md)"
        )
    return DirectSwitch(group)


def _sudo(settings: UserSettings, euid: int, group: int) -> UserSwitch:
    return SudoSwitch(settings.launcher_command)


# supervisor.worker.launcher -> the switch it names, made from the settings, the
# supervisor's effective uid and its group
SWITCHES: dict[str, Callable[[UserSettings, int, int], UserSwitch]] = {
    "direct": _direct,
    "sudo": _sudo,
}


def choose_switch(settings: UserSettings, *, euid: int, group: int) -> UserSwitch:
    """The switch ``supervisor.worker.launcher`` names (``auto``: direct as root, else sudo)."""
    kind = settings.launcher
    if kind == "auto":
        kind = "direct" if euid == 0 else "sudo"
    return SWITCHES[kind](settings, euid, group)


@dataclass
class RunAs:
    """The user one worker runs as, and how to reach it; ``finished`` once it exited."""

    user: WorkerUser
    switch: UserSwitch
    exclusive: bool  # no other worker runs as this user: everything of it may be killed
    _pool: UserPool | None = None
    _pipeline: str = ""
    _done: bool = field(default=False)

    def finished(self) -> None:
        """The worker exited: kill whatever its user left running (a pool's user only), and
        give the user back to the pool. Only the first call does anything."""
        if self._done:
            return
        self._done = True
        if self.exclusive:
            self.switch.kill_all(self.user)
        if self._pool is not None:
            self._pool.release(self._pipeline, self.user)


class UserPool:
    """The users of ``supervisor.worker.users``; see the module docstring. Used by the
    control loop's thread only."""

    def __init__(self, users: Sequence[WorkerUser], switch: UserSwitch, *, shared: bool) -> None:
        self._users = list(users)
        self._switch = switch
        self._shared = shared
        self._busy: dict[str, str] = {}  # user -> the pipeline that runs as it
        self._last: dict[str, str] = {}  # pipeline -> the user it had last

    @classmethod
    def from_settings(cls, settings: UserSettings, *, group: int) -> UserPool | None:
        """The pool, its users checked (WorkerUserError); None for workers run as the
        supervisor."""
        if not settings.separate:
            return None
        users = [
            resolve_user(name, min_uid=settings.min_uid, group=group) for name in settings.users
        ]
        switch = choose_switch(settings, euid=os.geteuid(), group=group)
        return cls(users, switch, shared=settings.run_as == "shared")

    @property
    def switch(self) -> UserSwitch:
        return self._switch

    def take(self, pipeline: str) -> RunAs:
        """A user for ``pipeline``'s worker; WorkerUserError when every one is busy."""
        if self._shared:
            return RunAs(self._users[0], self._switch, exclusive=False)
        free = [user for user in self._users if user.name not in self._busy]
        last = self._last.get(pipeline)
        chosen = next((user for user in free if user.name == last), free[0] if free else None)
        if chosen is None:
            raise WorkerUserError(
                f"every user of supervisor.worker.users runs a pipeline ({len(self._users)}): "
                "list at least one per slot"
            )
        self._busy[chosen.name] = pipeline
        self._last[pipeline] = chosen.name
        return RunAs(chosen, self._switch, exclusive=True, _pool=self, _pipeline=pipeline)

    def claim(self, pipeline: str, name: str) -> RunAs | None:
        """The user a worker adopted from a previous supervisor runs as, taken for
        ``pipeline`` as ``take`` would; None if it is not one of this pool's."""
        user = next((user for user in self._users if user.name == name), None)
        if user is None:
            return None
        if self._shared:
            return RunAs(user, self._switch, exclusive=False)
        self._busy[user.name] = pipeline
        self._last[pipeline] = user.name
        return RunAs(user, self._switch, exclusive=True, _pool=self, _pipeline=pipeline)

    def release(self, pipeline: str, user: WorkerUser) -> None:
        if self._busy.get(user.name) == pipeline:
            del self._busy[user.name]


def user_pool_at_start(
    settings: UserSettings,
    supervisor: str,
    *,
    workers_dir: Path,
    interpreter: Path,
    checkpoint_root: str,
) -> UserPool | None:
    """The users a starting supervisor's workers run as (None: the supervisor's own, said in
    a warning). SupervisorStartError when a user is refused, or when a worker of another user
    could not reach its directory (in ``workers_dir``), its local checkpoints or its
    interpreter: the message names the directory that stops it."""
    try:
        pool = UserPool.from_settings(settings, group=os.getgid())
    except WorkerUserError as exc:
        raise SupervisorStartError(f"cannot run workers as other users: {exc}") from None
    if pool is None:
        log.warning(
            "event=workers_run_as_supervisor supervisor=%s user=%s reason=%r",
            supervisor,
            _user_name(),
            "a pipeline's code can read this supervisor's credentials and every other "
            "pipeline's files: set supervisor.worker.run.as (docs/security.md)",
        )
        return None
    places = {"supervisor.local.dir": workers_dir, "the worker's interpreter": interpreter}
    checkpoints = local_pipeline_directory(checkpoint_root, "x")
    if checkpoints is not None:
        places["pipeline.checkpoint.root"] = checkpoints.parent
    for what, path in places.items():
        closed = closed_to_others(path)
        if closed is not None:
            raise SupervisorStartError(
                f"workers of other users cannot reach {what} {path}: {closed} is closed "
                "to them (no o+x); open it (chmod o+x) or choose another place"
            )
    log.info(
        "event=workers_run_as supervisor=%s mode=%s users=%s launcher=%s",
        supervisor,
        settings.run_as,
        ",".join(settings.users),
        pool.switch.name,
    )
    return pool


def _user_name() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())
