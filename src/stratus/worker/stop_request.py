"""The worker's stop request: SIGTERM (or SIGINT), or EOF on stdin, whichever comes first.

The worker's monitor holds the other end of its stdin; EOF there means the monitor is gone
(killed, or a warm worker's supervisor gone before a hand-over), and a worker must not outlive
it (a worker outlives its supervisor, up to its lease, but never its monitor). Either event
sets one ``threading.Event`` and runs the callbacks registered with ``on_request`` once, on
a thread of this module (never in a signal handler, where taking a lock could deadlock the
main thread)::

    stop = StopRequest()
    stop.install_signal_handlers()      # main thread only
    stop.watch(sys.stdin.fileno())      # a daemon thread reads until EOF
    stop.on_request(lambda: query.stop())
    stop.wait(5.0)                      # True once a stop was requested
    stop.reason                         # 'SIGTERM', 'stdin closed: its monitor is gone'
    stop.outcome()                      # how a run ends when stopped: STOPPED, or FENCED

A request may carry the outcome of the run it stops (``request(reason, outcome)``): a worker
fenced by a newer one stops as on any request, but ends FENCED, not STOPPED.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable

from stratus.process import watch_for_eof
from stratus.worker.outcome import Outcome

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
STDIN_CLOSED = "stdin closed: its monitor is gone"


class StopRequest:
    """One stop request, set at most once; see the module docstring."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []
        self._reason: str | None = None
        self._outcome: Outcome | None = None
        self._wakeup: tuple[int, int] | None = None

    def requested(self) -> bool:
        """Whether a stop was requested (a method: its answer changes under a caller's feet)."""
        return self.event.is_set()

    @property
    def reason(self) -> str | None:
        return self._reason

    def wait(self, timeout: float | None) -> bool:
        """Block up to ``timeout`` seconds; whether a stop was requested."""
        return self.event.wait(timeout)

    def outcome(self, note: str | None = None) -> Outcome:
        """How a run that this request stopped ends: the request's outcome, else STOPPED."""
        return self._outcome or Outcome.stopped(note)

    def request(self, reason: str, outcome: Outcome | None = None) -> None:
        """Ask the worker to stop, its run to end with ``outcome`` (None: STOPPED); the first
        request runs the callbacks, later ones nothing."""
        with self._lock:
            if self._reason is not None:
                return
            self._reason = reason
            self._outcome = outcome
            callbacks = list(self._callbacks)
        log.info("event=stop_requested reason=%r", reason)
        self.event.set()
        for callback in callbacks:
            _run_callback(callback)

    def on_request(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` when a stop is requested (at once if one already was)."""
        with self._lock:
            if self._reason is None:
                self._callbacks.append(callback)
                return
        _run_callback(callback)

    def install_signal_handlers(self) -> None:
        """Turn SIGTERM and SIGINT into stop requests (call again after pyspark replaced
        SIGINT's handler). Main thread only."""
        if self._wakeup is None:
            read_end, write_end = os.pipe()
            os.set_blocking(write_end, False)
            self._wakeup = (read_end, write_end)
            signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
            self._start_thread(self._read_signals, "stop-signals")
        for signum in STOP_SIGNALS:
            signal.signal(signum, _note_signal)

    def watch(self, fd: int) -> None:
        """Request a stop when the file descriptor ``fd`` (the worker's stdin) reaches EOF."""
        watch_for_eof(fd, lambda: self.request(STDIN_CLOSED), name="stop-stdin")

    def _read_signals(self) -> None:
        assert self._wakeup is not None
        while True:
            data = os.read(self._wakeup[0], 64)
            for signum in data:
                if signum in STOP_SIGNALS:
                    self.request(signal.Signals(signum).name)

    @staticmethod
    def _start_thread(target: Callable[[], None], name: str) -> None:
        threading.Thread(target=target, name=name, daemon=True).start()


def _note_signal(signum: int, frame: object) -> None:
    """The Python-level handler: nothing to do, the wakeup fd already carries the signal."""


def _run_callback(callback: Callable[[], None]) -> None:
    try:
        callback()
    except Exception:
        log.exception("event=stop_callback_failed callback=%r", callback)
