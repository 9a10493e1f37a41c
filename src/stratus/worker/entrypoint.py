"""Loads an app's entrypoint, ``package.module:function``, from the unpacked package.

The package's directory goes first on ``sys.path``, so its modules win over any installed
module of the same name. Every failure is an ``EntrypointError`` naming the entrypoint and
what is wrong with it::

    function = load_entrypoint("jobs.main:run", Path("/srv/code/ab12"))
    load_entrypoint("jobs.main:run", empty_dir)
    # EntrypointError: entrypoint 'jobs.main:run': no module named 'jobs' in the package
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stratus.worker.errors import EntrypointError


def load_entrypoint(entrypoint: str, code_dir: Path) -> Callable[..., Any]:
    """The function ``entrypoint`` names, imported with ``code_dir`` first on sys.path."""
    module_name, _, function_name = entrypoint.partition(":")
    if not module_name or not function_name:
        raise EntrypointError(f"entrypoint {entrypoint!r}: must be package.module:function")
    code_path = str(code_dir)
    if code_path not in sys.path:
        sys.path.insert(0, code_path)
    importlib.invalidate_caches()
    module = _import(entrypoint, module_name)
    try:
        function = getattr(module, function_name)
    except AttributeError:
        raise EntrypointError(
            f"entrypoint {entrypoint!r}: module {module_name!r} has no function {function_name!r}"
        ) from None
    if not callable(function):
        raise EntrypointError(
            f"entrypoint {entrypoint!r}: {function_name!r} in module {module_name!r} is a "
            f"{type(function).__name__}, not a function"
        )
    return function  # type: ignore[no-any-return]


def _import(entrypoint: str, module_name: str) -> Any:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and _is_prefix(exc.name, module_name):
            raise EntrypointError(
                f"entrypoint {entrypoint!r}: no module named {exc.name!r} in the package"
            ) from exc
        raise EntrypointError(
            f"entrypoint {entrypoint!r}: importing {module_name!r} failed: {exc}; add the "
            "missing module to the package or to its requirements"
        ) from exc
    except Exception as exc:
        raise EntrypointError(
            f"entrypoint {entrypoint!r}: importing {module_name!r} raised "
            f"{type(exc).__name__}: {exc}"
        ) from exc


def _is_prefix(missing: str, module_name: str) -> bool:
    """Whether ``missing`` is ``module_name`` or one of its parent packages."""
    return module_name == missing or module_name.startswith(missing + ".")
