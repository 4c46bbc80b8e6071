"""The argument parser of every ``fpemu`` command, its help formatter and argument types.

- :class:`Parser` raises :class:`~fpemu.cli.errors.UsageError` instead of printing usage and
  exiting, so :func:`fpemu.cli.main` prints one line; and it reads a token such as ``-1e-5``,
  ``-inf`` or ``-0x1p-3`` as a value, not as an unknown option.
- :class:`HelpFormatter` adds ``(default: ...)`` to every option that has a default.
- The types (:func:`int_at_least`, :func:`number`, :func:`name_of`) check a value while it is
  parsed and say what is accepted.

>>> p = Parser(prog="demo")
>>> _ = p.add_argument("x", type=number())
>>> _ = p.add_argument("--k", type=int_at_least(1), default=4)
>>> p.parse_args(["-1e-5"]).x
-1e-05
>>> p.parse_args(["1", "--k", "0"])
Traceback (most recent call last):
...
fpemu.cli.errors.UsageError: --k 0: expected an integer >= 1
"""

from __future__ import annotations

import argparse
import math
import re
import textwrap
from collections.abc import Callable, Iterable
from typing import Any, NoReturn

from fpemu.cli.errors import UsageError, argparse_message

__all__ = [
    "HelpFormatter", "Parser", "accepted", "int_at_least", "model_names", "name_of", "number",
    "paragraph",
]  # fmt: skip

#: A negative number (or -inf, -nan): a value, never an option.
_NEGATIVE = re.compile(r"^-(\d|\.\d|inf$|infinity$|nan$)", re.IGNORECASE)


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors raise :class:`UsageError` (one line, exit status 2)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: subcommand -> why it cannot run here (a missing optional package and its extra)
        self.unavailable: dict[str, str] = {}

    def error(self, message: str) -> NoReturn:
        """Raise the rewritten message instead of printing usage and exiting."""
        raise UsageError(argparse_message(message))

    def _parse_optional(self, arg_string: str) -> Any:
        # argparse takes "-1e-5" or "-inf" for an unknown option (only "-1" and "-0.5" count
        # as numbers there): a leading minus followed by a digit or inf/nan is a value here.
        if _NEGATIVE.match(arg_string):
            return None
        return super()._parse_optional(arg_string)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Shows ``(default: X)`` after each option's help, except for None and False defaults."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            default is None
            or default is False
            or default == argparse.SUPPRESS
            or ("default" in text)
        ):
            return text
        return super()._get_help_string(action)


def accepted(names: Iterable[str], limit: int = 0) -> str:
    """``"a, b, c"`` (cut after ``limit`` names with ``", ..."`` when limit > 0).

    >>> accepted(["a", "b", "c"], limit=2)
    'a, b, ...'
    """
    names = list(names)
    if limit and len(names) > limit:
        return ", ".join(names[:limit]) + ", ..."
    return ", ".join(names)


def paragraph(text: str) -> str:
    """``text`` wrapped at 78 columns (epilogs keep their line breaks, so wrap them here)."""
    return textwrap.fill(" ".join(text.split()), width=78)


def model_names() -> list[str]:
    """The accumulation models to list in help: every name without a dot (instruction models
    such as ``sm90.mma.f16.f32`` are many; :func:`fpemu.linalg.models` lists them)."""
    from fpemu.linalg import models  # noqa: PLC0415 - the registry fills up on import

    return [m for m in models() if "." not in m]


def int_at_least(lo: int, hi: int | None = None) -> Callable[[str], int]:
    """An argument type: an integer in ``[lo, hi]``.

    >>> int_at_least(0)("3")
    3
    """

    def parse(text: str) -> int:
        try:
            v = int(text, 10)
        except ValueError:
            v = None
        if v is None or v < lo or (hi is not None and v > hi):
            within = f">= {lo}" if hi is None else f"from {lo} to {hi}"
            raise argparse.ArgumentTypeError(f"{text}: expected an integer {within}")
        return v

    parse.__name__ = "integer"
    return parse


def number(*, positive: bool = False, finite: bool = True) -> Callable[[str], float]:
    """An argument type: a float (finite unless ``finite=False``; > 0 when ``positive``).

    >>> number(positive=True)("1e-3")
    0.001
    """

    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            v = math.nan
        bad = math.isnan(v) and text.strip().lower().lstrip("+-") != "nan"
        bad = bad or (finite and not math.isfinite(v)) or (positive and not v > 0)
        if bad:
            what = "a positive number" if positive else "a finite number" if finite else "a number"
            raise argparse.ArgumentTypeError(f"{text}: expected {what}")
        return v

    parse.__name__ = "number"
    return parse


def name_of(what: str, resolve: Callable[[str], Any], names: Iterable[str]) -> Callable[[str], str]:
    """An argument type: a name ``resolve`` accepts (aliases too); returns the text as given.

    ``names`` are listed in the error message. ``resolve`` raising ValueError, TypeError or
    KeyError means "unknown".

    >>> from fpemu.formats import get_format
    >>> fmt = name_of("format", get_format, ["float16", "bfloat16"])
    >>> fmt("bf16")
    'bf16'
    >>> fmt("bf17")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: bf17: unknown format; accepted: float16, bfloat16
    """
    listed = accepted(names)

    def parse(text: str) -> str:
        try:
            resolve(text)
        except (ValueError, TypeError, KeyError):
            raise argparse.ArgumentTypeError(
                f"{text}: unknown {what}; accepted: {listed}"
            ) from None
        return text

    parse.__name__ = what
    return parse
