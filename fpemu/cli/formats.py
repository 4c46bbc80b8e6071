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
from collections.abc import Sequence

from rich import box
from rich.console import Console
from rich.table import Table

from fpemu.cli import output
from fpemu.cli.args import accepted, name_of
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


#: Columns of the compact table, for a terminal too narrow for every column (80 columns).
COMPACT = ("name", "bits", "e/m", "bias", "specials", "max", "tiny", "eps")


def _exp2(x: float) -> str:
    mant, exp = math.frexp(x)
    return f"2^{exp - 1}" if mant == 0.5 else f"{x:.3g}"


def compact_row(f: Format) -> tuple[str, ...]:
    """The compact table row: ``tiny`` and ``eps`` as powers of two.

    >>> compact_row(get_format("fp16"))
    ('float16', '16', '5/10', '15', 'ieee', '65504', '2^-14', '2^-10')
    """
    return (
        f.name, str(f.bits), f"{f.ebits}/{f.mbits}", str(f.bias), f.specials,
        f"{f.max:.6g}", _exp2(f.tiny), _exp2(f.eps),
    )  # fmt: skip


def configure(parser: argparse.ArgumentParser) -> None:
    """Add ``fpemu formats``' arguments to ``parser``."""
    names = [*FORMATS, *ALIASES]
    parser.add_argument(
        "names", nargs="*", metavar="FORMAT", type=name_of("format", get_format, FORMATS),
        help=f"formats to show (default: all): {accepted(names)}",
    )  # fmt: skip
    parser.add_argument("--plain", action="store_true",
                        help="plain text, no colour or boxes (every column unless they do not fit "
                             "COLUMNS or the terminal, or --compact)")  # fmt: skip
    layout = parser.add_mutually_exclusive_group()
    layout.add_argument("--wide", action="store_true",
                        help="every column, whatever the terminal width (automatic when they fit, "
                             "and in a pipe)")  # fmt: skip
    layout.add_argument("--compact", action="store_true",
                        help=f"only the columns {', '.join(COMPACT)} (automatic in a terminal "
                             "too narrow for every column)")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    """Print the table; returns 0."""
    aliases = ", ".join(f"{a}={n}" for a, n in ALIASES.items())
    if args.plain:
        table = plain_table(HEADER, format_rows(args.names))
        w = output.width()
        if args.compact or (not args.wide and w is not None and
                            max(map(len, table.splitlines())) > w):  # fmt: skip
            fmts = [get_format(n) for n in args.names] if args.names else list(FORMATS.values())
            table = plain_table(COMPACT, [compact_row(f) for f in fmts])
        print(table)
        print(output.fill(f"\naliases: {aliases}"))
        return 0
    console = output.console(pipe_width=200)  # a pipe without COLUMNS: no wrapping at 80
    render(console, args.names, wide=True if args.wide else False if args.compact else None)
    return 0


def render(console: Console, names: Sequence[str] | None = None, *,
           wide: bool | None = None) -> None:  # fmt: skip
    """Print the table on ``console``: every column when ``wide``; when None, every column if
    they fit in the console's width, else the :data:`COMPACT` columns.

    >>> import io
    >>> con = Console(file=io.StringIO(), width=80)
    >>> render(con, ["fp16"])
    >>> max(len(line) for line in con.file.getvalue().splitlines()) <= 80
    True
    """
    table = _table(HEADER, format_rows(names))
    if wide is None:
        natural = console.measure(table, options=console.options.update(max_width=10_000))
        wide = natural.maximum <= console.width
    if not wide:
        fmts = [get_format(n) for n in names] if names else list(FORMATS.values())
        table = _table(COMPACT, [compact_row(f) for f in fmts])
    console.print(table)
    if not wide:
        console.print("e/m: exponent/fraction bits; tiny: smallest normal; eps: ulp(1). "
                      "fpemu formats --wide for every column.")  # fmt: skip
    aliases = ", ".join(f"{a}={n}" for a, n in ALIASES.items())
    console.print(f"aliases: {aliases}")


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> Table:
    table = Table(box=box.SIMPLE_HEAD, title="fpemu formats", pad_edge=False,
                  collapse_padding=True)  # fmt: skip
    for col in header:
        left = col in ("name", "specials")
        table.add_column(col, justify="left" if left else "right", no_wrap=True)
    for row in rows:
        table.add_row(*row)
    return table
