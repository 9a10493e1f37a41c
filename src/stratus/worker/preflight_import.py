"""``python -m stratus.worker.preflight_import CODE_DIR ENTRYPOINT``: import an app's entry
point as its worker would (``load_entrypoint``), and nothing more: no Spark session, no
checkpoint, no heartbeat. The supervisor runs it in the new code's environment before it
stops the old worker of an update (``stratus.supervisor.preflight``).

Exit 0 once imported; exit 1 with the error on stderr, the user's exception line first
(``ValueError: bad setting``), then where it was raised in the package, then what stratus
makes of it.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Sequence
from pathlib import Path

from stratus.worker.entrypoint import load_entrypoint
from stratus.worker.errors import EntrypointError

ERROR_MARKER = "stratus-preflight-error:\n"  # what follows on stderr is the report
IMPORT_FAILED = 1
USAGE = 2


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        print(
            "usage: python -m stratus.worker.preflight_import CODE_DIR ENTRYPOINT", file=sys.stderr
        )
        return USAGE
    code_dir, entrypoint = Path(args[0]), args[1]
    try:
        load_entrypoint(entrypoint, code_dir)
    except EntrypointError as exc:
        sys.stderr.write(ERROR_MARKER + describe(exc, code_dir) + "\n")
        return IMPORT_FAILED
    return 0


def describe(exc: EntrypointError, code_dir: Path) -> str:
    """The user's exception line, where in the package it was raised, then ``exc``."""
    cause = exc.__cause__
    if cause is None:
        return str(exc)
    lines = traceback.format_exception_only(type(cause), cause)
    first = lines[-1].strip() if lines else f"{type(cause).__name__}: {cause}"
    where = _package_frame(cause, code_dir)
    return "\n".join(part for part in (first, where, str(exc)) if part)


def _package_frame(cause: BaseException, code_dir: Path) -> str:
    """``at <file>, line N`` of the innermost frame in the package, if any."""
    frames = [
        frame
        for frame in traceback.extract_tb(cause.__traceback__)
        if frame.filename.startswith(str(code_dir))
    ]
    if isinstance(cause, SyntaxError) and cause.filename and cause.lineno:
        return f"at {Path(cause.filename).name}, line {cause.lineno}"
    if not frames:
        return ""
    frame = frames[-1]
    return f"at {Path(frame.filename).relative_to(code_dir)}, line {frame.lineno}"


if __name__ == "__main__":
    sys.exit(main())
