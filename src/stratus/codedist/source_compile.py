"""Byte-compiles a package's Python files, so code that cannot even parse is refused at
``validate``, ``submit`` and ``update``, before anything stops or starts.

The files are compiled in memory, never written, never run: ``compile`` parses and emits
bytecode only. The work is bounded: a file over ``MAX_SOURCE_BYTES``, and the files past
``MAX_COMPILED_BYTES`` in all (in name order), are not compiled (a Python file that large is
generated, not written; the supervisor's preflight still imports the entry point), so the
parser's memory stays at a few hundred MiB at most and its time at seconds; a file too deep
for the parser fails as a file that does not compile::

    problem = compile_error("etl/main.py", b"def f(:\\n")
    problem  # "etl/main.py, line 1: invalid syntax"

An import that fails at run time (a missing module, an exception at import) is not seen
here: the supervisor's preflight imports the entry point before it switches versions
(``stratus.supervisor.preflight``).
"""

from __future__ import annotations

PYTHON_SUFFIX = ".py"
MAX_SOURCE_BYTES = 2 * 1024 * 1024  # a larger file is not compiled
MAX_COMPILED_BYTES = 16 * 1024 * 1024  # of one package, in all


def is_python_source(name: str) -> bool:
    """Whether the package entry ``name`` is a Python file this check compiles."""
    return name.endswith(PYTHON_SUFFIX) and not name.endswith("/")


def compiled_within_budget(sizes: list[tuple[str, int]]) -> list[str]:
    """Of the Python files ``sizes`` names (name, bytes), those compiled: in name order,
    none over ``MAX_SOURCE_BYTES``, until ``MAX_COMPILED_BYTES`` in all."""
    chosen, total = [], 0
    for name, size in sorted(sizes):
        if size > MAX_SOURCE_BYTES or total + size > MAX_COMPILED_BYTES:
            continue
        chosen.append(name)
        total += size
    return chosen


def compile_error(name: str, source: bytes) -> str | None:
    """Why ``source`` (the file ``name`` of a package) does not compile, naming the file and
    the line; None if it compiles."""
    try:
        compile(source, name, "exec", dont_inherit=True)
    except SyntaxError as exc:  # IndentationError and TabError too
        return _syntax_problem(name, exc)
    except ValueError as exc:  # a NUL byte in the source
        return f"{name}: {exc}"
    except (RecursionError, MemoryError):
        return f"{name}: too deeply nested for the Python parser"
    return None


def _syntax_problem(name: str, exc: SyntaxError) -> str:
    where = f"{name}, line {exc.lineno}" if exc.lineno else name
    text = (exc.text or "").strip()
    shown = f": {text[:120]}" if text else ""
    return f"{where}: {exc.msg}{shown}"
