"""A user's Python file on the command line: ``FILE.py:FUNC`` imported as ``python FILE.py``
would (its folder first on ``sys.path``), every failure one line (``fpemu validate model``,
``validate step`` and ``emulate`` take one).

>>> load_function("nowhere.py:make", label="FILE.py:FACTORY", example="mymodel.py:make")
Traceback (most recent call last):
...
fpemu.cli.errors.UsageError: FILE.py:FACTORY nowhere.py:make: no file nowhere.py
>>> one_line(KeyError("no data"))
"KeyError: 'no data'"
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

from fpemu.cli.errors import UsageError

__all__ = ["call_function", "load_function", "one_line"]


def one_line(exc: BaseException) -> str:
    """``TypeName: first line of the message``."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def load_function(target: str, *, label: str = "FILE.py:FUNC", example: str = "train.py:main"
                  ) -> Any:  # fmt: skip
    """Import ``FILE.py`` (its folder first on sys.path) and return its function.

    Raises:
        UsageError: (a ValueError) not ``FILE.py:FUNC``, a missing file, an import error, or no
            such function; the message starts with ``label`` and the target.
    """
    path, colon, name = target.rpartition(":")
    if not colon or not path.endswith(".py") or not name.isidentifier():
        raise UsageError(f"{label} {target}: accepted a Python file and a function name, "
                         f"e.g. {example}")  # fmt: skip
    if not Path(path).is_file():
        raise UsageError(f"{label} {target}: no file {path}")
    folder = str(Path(path).resolve().parent)
    if folder not in sys.path:  # as `python FILE.py` does: modules beside FILE.py import
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    if spec is None or spec.loader is None:  # pragma: no cover - a .py file always has one
        raise UsageError(f"{label} {target}: cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        raise UsageError(f"{label} {target}: {path} line {exc.lineno}: {exc.msg}") from exc
    except Exception as exc:  # the user's module failed: say where, in one line
        raise UsageError(f"{label} {target}: importing {path} raised {one_line(exc)}"
                         ) from exc  # fmt: skip
    fn = getattr(module, name, None)
    if not callable(fn):
        raise UsageError(f"{label} {target}: {path} has no function {name}")
    return fn


def call_function(fn: Any, *, label: str, target: str, what: str = "the function") -> Any:
    """``fn()``; an exception from the user's code becomes one line naming ``target``
    (``fpemu --debug ...`` shows the traceback).

    Raises:
        UsageError: ``{label} {target}: {what} raised TypeName: first line``.
    """
    try:
        return fn()
    except Exception as exc:  # the user's function failed: one line (--debug: the traceback)
        raise UsageError(f"{label} {target}: {what} raised {one_line(exc)}") from exc
