"""How a worker's run ended: the final heartbeat state, its error, and the exit code.

Exit codes are part of the contract with the supervisor::

    Outcome.finished().exit_code                      # 0: a batch returned, an sdp ran once
    Outcome.stopped().exit_code                       # 0: stopped on order, checkpoints kept
    Outcome.failed("entrypoint 'a:b': ...").exit_code # 1: the pipeline failed; see error
    USAGE_EXIT                                        # 2: no usable spec file, no heartbeat
    Outcome.fenced("a newer worker ...").exit_code    # 3: a higher token owns the checkpoint
    Outcome.refused("the checkpoint ...").exit_code   # 4: FAILED, and starting it again
                                                      #    cannot help: not restarted
"""

from __future__ import annotations

from dataclasses import dataclass

from stratus.api.records import WorkerState

OK_EXIT = 0
FAILED_EXIT = 1
USAGE_EXIT = 2
FENCED_EXIT = 3
REFUSED_EXIT = 4
MAX_ERROR_CHARS = 4000  # an error travels in a heartbeat znode: keep it readable and small


@dataclass(frozen=True)
class Outcome:
    """The end of a run: one of the final states FINISHED, STOPPED, FAILED or FENCED.
    ``final``: a FAILED run that would fail the same way again (its supervisor does not
    restart it until its assignment changes)."""

    state: WorkerState
    error: str | None = None
    final: bool = False

    @classmethod
    def finished(cls) -> Outcome:
        return cls(WorkerState.FINISHED)

    @classmethod
    def stopped(cls, note: str | None = None) -> Outcome:
        return cls(WorkerState.STOPPED, clip(note) if note else None)

    @classmethod
    def failed(cls, error: str) -> Outcome:
        return cls(WorkerState.FAILED, clip(error))

    @classmethod
    def refused(cls, error: str) -> Outcome:
        return cls(WorkerState.FAILED, clip(error), final=True)

    @classmethod
    def fenced(cls, error: str) -> Outcome:
        return cls(WorkerState.FENCED, clip(error))

    @property
    def exit_code(self) -> int:
        if self.state is WorkerState.FAILED:
            return REFUSED_EXIT if self.final else FAILED_EXIT
        return FENCED_EXIT if self.state is WorkerState.FENCED else OK_EXIT


def without_stack(text: str) -> str:
    """A Java exception's message without its stack frames (``\tat ...`` lines onwards)."""
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if line.lstrip().startswith("at ") and line[:1].isspace():
            return "\n".join(lines[:index]).rstrip()
    return text


def clip(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """``text`` cut to ``limit`` characters, keeping its start (what failed, and why)."""
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"
