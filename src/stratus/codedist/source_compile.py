"""Byte-compiles a package's Python files, so code that cannot even parse is refused at
``validate``, ``submit`` and ``update``, before anything stops or starts.

The files are compiled in memory, never written, never run: ``compile`` parses and emits
bytecode only. The work is bounded by what the package check bounds already (at most
``package.max.unpacked.bytes`` of source, read ``CHUNK`` by chunk from the zip), and a file
too deep for the parser fails as a file that does not compile::

    problem = compile_error("etl/main.py", b"def f(:\\n")
    problem  # "etl/main.py, line 1: invalid syntax"

An import that fails at run time (a missing module, an exception at import) is not seen
here: the supervisor's preflight imports the entry point before it switches versions
(``stratus.supervisor.preflight``).
"""

from __future__ import annotations

PYTHON_SUFFIX = ".py"


def is_python_source(name: str) -> bool:
    """Whether the package entry ``name`` is a Python file this check compiles."""
    return name.endswith(PYTHON_SUFFIX) and not name.endswith("/")


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
