"""The pipeline's own exception, found in the text of a worker's error and put first.

An exception raised in a streaming batch reaches the worker wrapped: PySpark's
``StreamingQueryException``, whose message holds Spark's query description and the Python
traceback that py4j carried back from the batch function, a few hundred characters of
frames before the line that says what went wrong (``RowCountMismatch: batch 0: ...``).
``user_exception`` finds that line: the last line that ends a block of traceback frames and
names an exception that is not a wrapper (py4j's, PySpark's captured ones, a JVM class);
``error_first`` puts it before the text::

    error_first("StreamingQueryException: [STREAM_FAILED] ... Traceback ... \\n"
                "RowCountMismatch: batch 0: expected 10 rows, got 0\\n ...")
    # "RowCountMismatch: batch 0: expected 10 rows, got 0\\nStreamingQueryException: ..."
"""

from __future__ import annotations

import re
from collections import deque

# ``Name: message`` or a bare ``Name`` (dotted), as Python prints an exception's last line
_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*)(?:: .*)?$")
_FRAME = re.compile(r'^\s+File "')  # a traceback's frame: its source line and carets follow
FRAME_LOOKBACK = 3
WRAPPERS = frozenset(
    {
        "StreamingQueryException",
        "Py4JJavaError",
        "Py4JError",
        "Py4JNetworkError",
        "PythonException",
        "CapturedException",
        "UnknownException",
    }
)
JVM_PREFIXES = ("java.", "javax.", "scala.", "org.apache.", "py4j.")


def user_exception(text: str) -> str | None:
    """The line naming the pipeline's own exception in ``text``, if there is one: the last
    that ends a traceback (a frame's ``File "..."`` line among the few lines before it)."""
    found = None
    recent: deque[str] = deque(maxlen=FRAME_LOOKBACK)
    for line in filter(str.strip, text.splitlines()):
        ends_frames = any(_FRAME.match(before) for before in recent)
        if not line[:1].isspace() and ends_frames and _is_user_exception(line):
            found = line.strip()
        recent.append(line)
    return found


def error_first(text: str) -> str:
    """``text`` with the pipeline's own exception line first (unchanged if it is already,
    or if there is none)."""
    line = user_exception(text)
    if line is None or text.lstrip().startswith(line):
        return text
    return f"{line}\n{text}"


def _is_user_exception(line: str) -> bool:
    match = _EXCEPTION_LINE.match(line.strip())
    if match is None:
        return False
    name = match.group(1)
    return not name.startswith(JVM_PREFIXES) and name.rsplit(".", 1)[-1] not in WRAPPERS
