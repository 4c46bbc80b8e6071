"""Errors of the command line: a bad argument is one line on stderr and exit status 2.

A command raises :class:`UsageError` with ``"--arg VALUE: what is accepted"``;
:func:`fpemu.cli.main` prints ``fpemu COMMAND: --arg VALUE: what is accepted`` and returns 2.
argparse's own messages are rewritten to the same shape by :func:`argparse_message`.

>>> argparse_message("argument --arch: invalid choice: 'rtx9000' (choose from 'v100', 't4')")
'--arch rtx9000: invalid choice; choose from v100, t4'
>>> argparse_message("argument --k: invalid int value: 'x'")
'--k x: expected an integer'
"""

from __future__ import annotations

import re

__all__ = ["EXTRAS", "UsageError", "argparse_message", "missing_extra"]


class UsageError(ValueError):
    """A bad command-line argument; the message reads ``--arg VALUE: what is accepted``.

    >>> str(UsageError("--k 0: expected an integer >= 1"))
    '--k 0: expected an integer >= 1'
    """


#: Optional top-level packages a command may need -> the ``pip install 'fpemu[EXTRA]'`` extra.
EXTRAS: dict[str, str] = {
    "torch": "torch",
    "keras": "torch",
    "cupy": "cupy",
    "dask": "scale",
    "distributed": "scale",
    "sklearn": "data",
    "matplotlib": "plot",
    "tqdm": "progress",
    "hypothesis": "strategies",
}


def missing_extra(exc: BaseException) -> str | None:
    """The extra to install when ``exc`` is a missing optional package, else None.

    Only a :class:`ModuleNotFoundError` of one of :data:`EXTRAS` counts: any other import
    error is a real bug and must not be reported as "not installed".

    >>> missing_extra(ModuleNotFoundError("No module named 'torch'", name="torch"))
    'torch'
    >>> missing_extra(ModuleNotFoundError("No module named 'fpemu.nope'", name="fpemu.nope"))
    >>> missing_extra(ImportError("cannot import name 'x' from 'torch'", name="torch"))
    """
    if type(exc) is not ModuleNotFoundError or not exc.name:
        return None
    return EXTRAS.get(exc.name.split(".")[0])


_TYPES = {"int": "an integer", "float": "a number", "Path": "a path"}
_CHOICE = re.compile(r"^argument (\S+): invalid choice: '?(.*?)'? \(choose from (.*)\)$", re.S)
_TYPE = re.compile(r"^argument (\S+): invalid (\w+) value: '(.*)'$", re.S)
_OTHER = re.compile(r"^argument (\S+): (.*)$", re.S)


def argparse_message(message: str) -> str:
    """Rewrite an argparse error message as ``--arg VALUE: what is accepted`` (one line).

    The first of several option strings names the argument (``--format/-f`` -> ``--format``).

    >>> argparse_message("argument --format/-f: expected one argument")
    '--format: expected a value'
    >>> argparse_message("the following arguments are required: VALUE")
    'the following arguments are required: VALUE'
    """
    message = " ".join(message.split())
    if m := _CHOICE.match(message):
        arg, value, choices = m.groups()
        return f"{_first(arg)} {value}: invalid choice; choose from {choices.replace(chr(39), '')}"
    if m := _TYPE.match(message):
        arg, kind, value = m.groups()
        return f"{_first(arg)} {value}: expected {_TYPES.get(kind, kind)}"
    if m := _OTHER.match(message):
        arg, rest = m.groups()
        if rest == "expected one argument":
            return f"{_first(arg)}: expected a value"
        if rest.startswith("expected "):
            return f"{_first(arg)}: {rest}"
        return f"{_first(arg)} {rest}"  # our argument types say "VALUE: what is accepted"
    return message


def _first(arg: str) -> str:
    return arg.split("/", maxsplit=1)[0]
