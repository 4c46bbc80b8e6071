"""``fpemu formats``: a table of every format's parameters, derived from the registry.

>>> bf16, e4m3 = format_rows(["bf16", "e4m3"])
>>> bf16[:6]
('bfloat16', '16', '8', '7', '127', 'ieee')
>>> e4m3[10:]
('448.0', '0.015625 (2^-6)', '0.001953125 (2^-9)', '0.125 (2^-3)')
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence

from rich import box
from rich.console import Console
from rich.table import Table

from fpemu.cli.explain import plain_table
from fpemu.formats import ALIASES, FORMATS, Format, get_format

#: Column titles, in order.
HEADER = (
    "name", "bits", "ebits", "mbits", "bias", "specials", "inf", "nan", "-0",
    "subnormals", "max", "tiny", "smallest subnormal", "eps",
)  # fmt: skip


def _power(x: float) -> str:
    """``x`` and, for a power of two, its exponent: ``0.015625 (2^-6)``."""
    mant, exp = math.frexp(x)
    text = repr(x) if len(repr(x)) <= 12 else f"{x:.6g}"
    return f"{text} (2^{exp - 1})" if mant == 0.5 else text


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def format_row(f: Format) -> tuple[str, ...]:
    """The table row of one format (all cells as text)."""
    return (
        f.name, str(f.bits), str(f.ebits), str(f.mbits), str(f.bias), f.specials,
        _yes(f.has_inf), _yes(f.has_nan), _yes(f.has_negative_zero), _yes(f.subnormals),
        repr(f.max) if len(repr(f.max)) <= 12 else f"{f.max:.6g}",
        _power(f.tiny), _power(f.smallest_subnormal), _power(f.eps),
    )  # fmt: skip


def format_rows(names: Sequence[str] | None = None) -> list[tuple[str, ...]]:
    """Rows for the named formats (aliases allowed), or for every registered format.

    Raises:
        ValueError: a name is unknown (the message lists the known ones).
    """
    formats = [get_format(n, arg="FORMAT") for n in names] if names else list(FORMATS.values())
    return [format_row(f) for f in formats]


def configure(parser: argparse.ArgumentParser) -> None:
    """Add ``fpemu formats``' arguments to ``parser``."""
    parser.add_argument(
        "names", nargs="*", metavar="FORMAT", help="formats to show (default: all), e.g. bf16"
    )
    parser.add_argument("--plain", action="store_true", help="plain text, no colour or boxes")


def run(args: argparse.Namespace) -> int:
    """Print the table; returns 0, or 2 for an unknown format name (message on stderr)."""
    try:
        rows = format_rows(args.names)
    except ValueError as err:
        print(f"fpemu formats: {err}", file=sys.stderr)
        return 2
    aliases = ", ".join(f"{a}={n}" for a, n in ALIASES.items())
    if args.plain:
        print(plain_table(HEADER, rows))
        print(f"\naliases: {aliases}")
        return 0
    console = Console(highlight=False)
    if not console.is_terminal:  # a pipe: no colour, and no wrapping at 80 columns
        console = Console(highlight=False, width=200)
    table = Table(*HEADER, box=box.SIMPLE_HEAD, title="fpemu formats")
    for row in rows:
        table.add_row(*row)
    console.print(table)
    console.print(f"aliases: {aliases}", soft_wrap=True)
    return 0
