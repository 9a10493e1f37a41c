"""What a client verb says on stderr while it retries toward a nimbus, so that it never waits
in silence: after ``NOTICE_AFTER_SECS`` of retries, which call it is, the seeds it asks, the
last error and how long it will still try (``client.retry.deadline.secs``, or ``--timeout``).

On a terminal that is a rich status line, updated at every retry and gone when the call
ends; otherwise (piped, or under ``--json``) exactly one plain line per command, which a log
keeps and a script can ignore::

    display = RetryDisplay(Console(stderr=True), interactive=True)
    with NimbusClient.from_config(conf, on_retry=display) as client, display:
        client.list_pipelines()
"""

from __future__ import annotations

from types import TracebackType

from rich.console import Console
from rich.status import Status

from stratus.api.echo import printable
from stratus.client import RetryNotice

NOTICE_AFTER_SECS = 1.0  # a failover normally ends before this: no line for it


class RetryDisplay:
    """A ``RetryNotice`` listener that shows why the command waits; see the module docstring."""

    def __init__(
        self, console: Console, *, interactive: bool, after_secs: float = NOTICE_AFTER_SECS
    ) -> None:
        self._console = console
        self._interactive = interactive
        self._after_secs = after_secs
        self._status: Status | None = None
        self._said = False

    def __call__(self, notice: RetryNotice) -> None:
        if notice.done:
            self.close()
            return
        if notice.elapsed_secs < self._after_secs:
            return
        line = waiting_line(notice)
        if not self._interactive:
            if not self._said:
                self._console.print(line, soft_wrap=True, markup=False, highlight=False)
                self._said = True
            return
        if self._status is None:
            self._status = self._console.status(line)
            self._status.start()
        else:
            self._status.update(line)

    def close(self) -> None:
        """Take the status line away (the call ended, or the command does)."""
        if self._status is not None:
            self._status.stop()
            self._status = None

    def __enter__(self) -> RetryDisplay:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def waiting_line(notice: RetryNotice) -> str:
    """The line that says what the command waits for, and until when."""
    error = printable(notice.error or "no detail")
    return (
        f"stratus: still trying {notice.what} after {notice.elapsed_secs:.1f} s "
        f"(attempt {notice.attempt}, seeds: {', '.join(notice.seeds)}): {error}; "
        f"giving up in {notice.remaining_secs:.0f} s"
    )
