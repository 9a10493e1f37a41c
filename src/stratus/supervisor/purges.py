"""The supervisor's part in a purge: delete the checkpoints the leader hands to it, and answer.

The leader records a purge of ``<pipeline.checkpoint.root>/<pipeline>`` in ZooKeeper
(``purges/<pipeline>``, ``api.purges.PurgeOrder``) and hands it to one live supervisor,
which can write the root its workers write (the nimbus often cannot). This supervisor
watches the orders; for each handed to it and not answered yet, on a thread of its own (the
control loop never waits for a file system), it deletes the directory and writes its answer,
``purge-outcomes/<pipeline>.<order>.<attempt>`` (``PurgeOutcome``): done, or the error.
The leader removes the order once an answer says done, or hands it to another supervisor::

    purger = CheckpointPurger(client, paths, "s1", checkpoint_root="/ck", privileged=None)
    purger.start()
    purger.close()

    purger = start_purger(client, paths, settings, users)   # the daemon's one line

Every supervisor, handed the order or not, deletes its logs of the pipeline's runs
(``run_logs.forget_runs``) when it first sees an order. It deletes checkpoints only under
its own ``pipeline.checkpoint.root``, never under a root an order
names (nothing read from ZooKeeper decides what a daemon deletes): an order of another root
is answered with an error that says so. Only ``<root>/<pipeline>``, resolved and checked to
be inside the root (``remove_checkpoints``). Files that a worker of another user wrote are
deletable by the daemons' group (``worker_access``: setgid and a default ACL); where that did
not hold (a file system without ACLs) the deletion is done again through the worker-user
machinery (``privileged``: root itself, or the worker launcher through sudo).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NodeExistsError
from pydantic import ValidationError

from stratus.api.clock import Clock
from stratus.api.purges import PurgeOrder, PurgeOutcome, PurgeState
from stratus.checkpoints import remove_checkpoints
from stratus.errors import StratusError
from stratus.supervisor.run_as import UserPool
from stratus.supervisor.run_logs import forget_runs
from stratus.supervisor.settings import SupervisorSettings
from stratus.zk.paths import ClusterPaths
from stratus.zk.watched import WatchedChildren

log = logging.getLogger(__name__)

RECHECK_SECS = 5.0  # a look at the orders even without a watch, and after a failed answer

Privileged = Callable[[str, str], object]  # (root, pipeline): delete with the workers' rights


class CheckpointPurger:
    """Carries out the purges handed to one supervisor; see the module docstring."""

    def __init__(
        self,
        client: KazooClient,
        paths: ClusterPaths,
        supervisor: str,
        *,
        checkpoint_root: str,
        privileged: Privileged | None,
        remove: Callable[[str, str], object] = remove_checkpoints,
        forget_logs: Callable[[str], object] = lambda _pipeline: None,
        wall: Clock = time.time,
    ) -> None:
        self._client = client
        self._paths = paths
        self._supervisor = supervisor
        self._root = checkpoint_root  # this supervisor's pipeline.checkpoint.root
        self._privileged = privileged
        self._remove = remove
        self._forget_logs = forget_logs  # pipeline -> its run logs here deleted
        self._forgotten: set[tuple[str, str]] = set()  # (pipeline, order id)
        self._wall = wall
        self._orders = WatchedChildren(client, paths.purges, PurgeOrder, self._wake)
        self._answered: set[tuple[str, str, int]] = set()  # (pipeline, order, attempt)
        self._wanted = threading.Event()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="checkpoint-purger", daemon=True)

    def start(self) -> None:
        self._orders.start()
        self._thread.start()

    def close(self) -> None:
        self._closed.set()
        self._wanted.set()
        self._thread.join(timeout=RECHECK_SECS)

    def _wake(self) -> None:
        """A watch saw the orders change (kazoo's thread: never blocks)."""
        self._wanted.set()

    def _run(self) -> None:
        while not self._closed.is_set():
            self._wanted.wait(RECHECK_SECS)
            self._wanted.clear()
            if self._closed.is_set():
                return
            for order in self._orders.snapshot().values():
                self._forget(order)
                if not self._mine(order):
                    continue
                try:
                    self._carry_out(order)
                except Exception:  # the next order, and the next look, must still come
                    log.exception(
                        "event=purge_error pipeline=%s supervisor=%s",
                        order.pipeline,
                        self._supervisor,
                    )

    def _forget(self, order: PurgeOrder) -> None:
        """Delete the pipeline's run logs on this host, once per order, whoever deletes its
        checkpoints: the name cannot be submitted again while the order stands."""
        key = (order.pipeline, order.id)
        if key not in self._forgotten:
            self._forgotten.add(key)
            self._forget_logs(order.pipeline)
            log.info(
                "event=run_logs_purged pipeline=%s supervisor=%s", order.pipeline, self._supervisor
            )

    def _mine(self, order: PurgeOrder) -> bool:
        return (
            order.supervisor == self._supervisor
            and order.state is PurgeState.PENDING
            and (order.pipeline, order.id, order.attempt) not in self._answered
        )

    def _still_mine(self, order: PurgeOrder) -> bool:
        """Whether ZooKeeper still holds ``order`` as handed to this supervisor: the snapshot
        may be older than a hand-over to another, that one's purge, and a new pipeline of
        the name (whose checkpoints must not be deleted)."""
        try:
            raw, _ = self._client.get(self._paths.purge(order.pipeline))
            current = PurgeOrder.model_validate_json(raw)
        except (KazooException, ValidationError):  # gone, unreadable: the next look decides
            return False
        return self._mine(current) and (current.id, current.attempt) == (order.id, order.attempt)

    def _carry_out(self, order: PurgeOrder) -> None:
        if not self._still_mine(order):
            return
        log.info(
            "event=purge_started pipeline=%s attempt=%d supervisor=%s root=%s",
            order.pipeline,
            order.attempt,
            self._supervisor,
            self._root,
        )
        error = self.delete(order)
        outcome = PurgeOutcome(
            pipeline=order.pipeline,
            order=order.id,
            attempt=order.attempt,
            supervisor=self._supervisor,
            done=error is None,
            error=error,
            time=self._wall(),
        )
        if self._answer(outcome):
            self._answered.add((order.pipeline, order.id, order.attempt))

    def delete(self, order: PurgeOrder) -> str | None:
        """Delete ``<root>/<pipeline>``; None when it is gone, else why not."""
        if order.root.rstrip("/") != self._root.rstrip("/"):
            return (
                f"the purge names the checkpoint root {order.root}, supervisor "
                f"{self._supervisor}'s pipeline.checkpoint.root is {self._root}: nothing deleted"
            )
        try:
            self._remove(self._root, order.pipeline)
            return None
        except PermissionError as exc:
            if self._privileged is None:
                return f"{type(exc).__name__}: {exc}"
            log.info(
                "event=purge_privileged pipeline=%s supervisor=%s reason=%r",
                order.pipeline,
                self._supervisor,
                str(exc),
            )
        except (OSError, StratusError) as exc:
            return f"{type(exc).__name__}: {exc}"
        try:
            self._privileged(self._root, order.pipeline)
        except (OSError, StratusError) as exc:
            return f"{type(exc).__name__}: {exc}"
        return None

    def _answer(self, outcome: PurgeOutcome) -> bool:
        """Write the answer; False if ZooKeeper did not take it (tried again later)."""
        path = self._paths.purge_outcome(outcome.node_name())
        try:
            self._client.create(path, outcome.model_dump_json().encode())
        except NodeExistsError:
            pass  # answered before a restart of this supervisor
        except KazooException as exc:
            log.warning(
                "event=purge_answer_failed pipeline=%s supervisor=%s error=%r",
                outcome.pipeline,
                self._supervisor,
                exc,
            )
            return False
        log.log(
            logging.INFO if outcome.done else logging.WARNING,
            "event=purge_%s pipeline=%s attempt=%d supervisor=%s error=%r",
            "done" if outcome.done else "failed",
            outcome.pipeline,
            outcome.attempt,
            self._supervisor,
            outcome.error,
        )
        return True


def start_purger(
    client: KazooClient, paths: ClusterPaths, settings: SupervisorSettings, users: UserPool | None
) -> CheckpointPurger:
    """The supervisor's purger, started: its own checkpoint root, and with workers of other
    users, their switch for what its own rights cannot delete; the pipelines' run logs
    under its local directory go with every purge."""
    workers = settings.local_dir / "workers"
    purger = CheckpointPurger(
        client,
        paths,
        settings.id,
        checkpoint_root=settings.spec.checkpoint_root,
        privileged=users.switch.purge_checkpoints if users is not None else None,
        forget_logs=lambda pipeline: forget_runs(workers / pipeline),
    )
    purger.start()
    return purger
