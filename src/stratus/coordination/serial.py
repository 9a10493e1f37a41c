"""One thread that runs tasks in the order they were posted: how the library serializes events.

The coordinator has two: its worker, which owns every candidacy's state machine and makes
all the ZooKeeper calls (kazoo's event thread only posts to it), and its dispatcher, which
runs user callbacks in order, so that a slow callback delays other callbacks but never the
election itself::

    worker = SerialThread("coordinator-worker", on_error=log_it)
    worker.start()
    worker.post(lambda: print("runs on the worker"))
    worker.stop()            # runs what was posted before, then ends
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

Task = Callable[[], None]
Post = Callable[[Task], None]  # post(task): run it on the worker thread, after earlier tasks
Dispatch = Callable[..., None]  # dispatch(callback, *args): run it on the dispatcher thread


class SerialThread:
    """A daemon thread draining a queue of tasks; ``on_error`` hears each task's exception."""

    def __init__(self, name: str, on_error: Callable[[Exception], None]) -> None:
        self._tasks: queue.SimpleQueue[Task | None] = queue.SimpleQueue()
        self._on_error = on_error
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def post(self, task: Task) -> None:
        self._tasks.put(task)

    def is_current(self) -> bool:
        """True when called from a task of this thread."""
        return self._thread is threading.current_thread()

    def stop(self, timeout: float = 5.0) -> None:
        """End after the tasks posted so far (waits up to ``timeout`` unless called from it)."""
        self._tasks.put(None)
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=timeout)

    def _run(self) -> None:
        while (task := self._tasks.get()) is not None:
            try:
                task()
            except Exception as exc:  # the thread must live on for the next task
                self._on_error(exc)
